"""The only module allowed to import ``jax._src``: one file to update on a JAX upgrade."""
