"""``python -m esopt.aggregate``: see :mod:`esopt.cli.aggregate`."""

import sys

from esopt.cli.aggregate import main

if __name__ == "__main__":
    sys.exit(main())
