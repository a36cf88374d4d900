"""`python -m jaxcore`: prints jaxcore's version and which backend plugins loaded, and why not."""

import jaxcore


def main() -> None:
    """Prints the plugin report of :func:`jaxcore.plugins.info`."""
    print(jaxcore.plugins.info().format())


if __name__ == "__main__":
    main()
