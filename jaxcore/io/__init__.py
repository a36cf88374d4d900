"""jaxcore.io: saving and loading pytrees (quantized weights included) as safetensors files.

`save` writes any pytree of arrays, quantized arrays and ``jaxcore.tree`` dataclasses to
one safetensors file, atomically, with metadata that names what it holds (the tree
structure, each quantized array's format and block size, a layout version and a digest of
every tensor). `load` reads it back bit for bit into the structure of a template, onto
given shardings; `metadata` describes a file without one. A damaged, foreign or
wrong-version file, or one that does not match the template, is a `CheckpointError`.
"""

from jaxcore.io._safetensors import VERSION, CheckpointError, load, metadata, save

__all__ = ["VERSION", "CheckpointError", "load", "metadata", "save"]
