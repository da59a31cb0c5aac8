"""``python -m esopt.evaluate``: see :mod:`esopt.cli.evaluate`."""

from esopt.cli.evaluate import main

if __name__ == "__main__":
    main()
