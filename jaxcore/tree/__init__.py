"""jaxcore.tree."""
