"""``python -m esopt.plan``: the study-design planner's old name, kept for one release; it says
so in one warning line and runs ``python -m esopt.design`` (:mod:`esopt.cli.design`)."""

import sys

from esopt.cli.design import main

if __name__ == "__main__":
    print("esopt: warning: python -m esopt.plan is deprecated and goes in a later release: "
          "it is now python -m esopt.design", file=sys.stderr)
    sys.exit(main())
