"""jaxcore.named."""
