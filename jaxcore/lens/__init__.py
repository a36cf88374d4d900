"""jaxcore.lens."""
