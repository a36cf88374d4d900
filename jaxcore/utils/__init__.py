"""jaxcore.utils."""
