"""The single source of jaxcore's version (the wheels and plugins read it)."""

__version__ = "0.1.0"
