"""``python -m esopt.migrate_ids``: see :mod:`esopt.cli.migrate_ids`."""

import sys

from esopt.cli.migrate_ids import main

if __name__ == "__main__":
    sys.exit(main())
