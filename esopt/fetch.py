"""``python -m esopt.fetch``: see :mod:`esopt.cli.fetch`."""

import sys

from esopt.cli.fetch import main

if __name__ == "__main__":
    sys.exit(main())
