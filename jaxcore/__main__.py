"""`python -m jaxcore`: jaxcore's version, its plugins (loaded or why not) and the JAX it runs on.

The last line names the installed jax and jaxlib and says whether they are inside the range
jaxcore is tested against.
"""

import jaxcore
from jaxcore import _jax_internals


def main() -> None:
    """Prints the plugin report of :func:`jaxcore.plugins.info`, then the JAX version line."""
    print(jaxcore.plugins.info().format())
    print(_jax_internals.version_report())


if __name__ == "__main__":
    main()
