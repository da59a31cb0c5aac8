"""``python -m esopt.migrate_ids RESULTS_ROOT [--dry-run]``: rename the run folders recorded
under the run ids of before the resolved plan to their current ids (``esopt.runtime.migrate_ids``),
once, so sweeps find the runs they finished. One line per folder it renames or leaves; exit 0,
or 2 (one ``esopt: error:`` line) when the path holds no run folders."""

from __future__ import annotations

import sys

from esopt.cli.common import Parser, fail, quiet
from esopt.core.errors import ConfigError


def main(argv: list[str] | None = None) -> int:
    quiet()
    ap = Parser(prog="python -m esopt.migrate_ids",
                description="Rename run folders recorded under their old run ids to their current ids.")
    ap.add_argument("root", help="a results root (holds <sweep>/runs/<id>/) or one sweep directory")
    ap.add_argument("--dry-run", action="store_true", help="say what would be renamed; change nothing")
    args = ap.parse_args(argv)
    from esopt.runtime.migrate_ids import migrate

    try:
        moves = migrate(args.root, dry_run=args.dry_run)
    except ConfigError as e:
        fail(str(e))
    for m in moves:
        if m.action != "current":
            print(m.line(), file=sys.stdout if m.action in ("renamed", "would rename") else sys.stderr)
    counts: dict[str, int] = {}
    for m in moves:
        counts[m.action] = counts.get(m.action, 0) + 1
    print(f"esopt: {len(moves)} run folder(s): " + ", ".join(f"{n} {a}" for a, n in sorted(counts.items())))
    return 0
