"""``python -m esopt.plan``: see :mod:`esopt.cli.plan`."""

import sys

from esopt.cli.plan import main

if __name__ == "__main__":
    sys.exit(main())
