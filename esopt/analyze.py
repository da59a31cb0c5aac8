"""``python -m esopt.analyze``: see :mod:`esopt.cli.analyze`."""

import sys

from esopt.cli.analyze import main

if __name__ == "__main__":
    sys.exit(main())
