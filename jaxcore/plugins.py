"""Backend plugin discovery (entry-point group ``jaxcore_plugins``)."""


def load_plugins() -> None:
    """Discovers and initialises installed plugins (filled in by the plugins work)."""
