"""``python -m esopt.design``: see :mod:`esopt.cli.design`."""

import sys

from esopt.cli.design import main

if __name__ == "__main__":
    sys.exit(main())
