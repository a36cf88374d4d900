"""jaxcore.quant."""
