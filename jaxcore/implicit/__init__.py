"""jaxcore.implicit."""
