"""jaxcore.kernels."""
