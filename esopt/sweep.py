"""``python -m esopt.sweep``: see :mod:`esopt.cli.sweep`."""

from esopt.cli.sweep import main

if __name__ == "__main__":
    main()
