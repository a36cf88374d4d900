"""`python -m jaxcore.launch --processes N [...] -- command [args]`: see `jaxcore.launch`."""

import sys

from jaxcore.launch._launcher import main

if __name__ == "__main__":
    sys.exit(main())
