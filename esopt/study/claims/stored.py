"""Reading a sweep's ``claims.json`` back, and the hashes that make its registration tamper-evident.

    read(path) -> dict                  {} when there is none; ConfigError (one line) when corrupt
    set_aside(path) -> Path             a corrupt file renamed to claims.corrupt-<UTC time>.json
    design_hash(design) -> str          sha256 of the design's canonical JSON
    current_design(reg) -> dict         the registered design in force

A corrupt file is one that is not JSON, not an object, or whose ``registration`` / ``looks`` do
not have the shape ``esopt.study.claims.register`` writes (a registration whose ``design`` is a
number, a look that is not an object). The sweeper keeps such a file aside under a new name and
registers the design afresh; the aggregator refuses it with one line.

Each registration (and amendment) records ``design_sha256``, the hash of the design it wrote (a
registration also ``graph_sha256``, its graph's), and each look the hashes of the design and
graph it judged (``compute``): a design or graph edited by hand afterwards no longer matches
either, and ``judge_look`` reads its verdicts as exploratory.
"""

from __future__ import annotations

import hashlib
import json
import time
from pathlib import Path
from typing import Any, Mapping

from esopt.core.errors import ConfigError

CORRUPT_PREFIX = "claims.corrupt-"  # where a corrupt claims.json is kept: claims.corrupt-<time>.json


def current_design(reg: Mapping) -> dict:
    """The registered design in force: the last amendment's, else the first."""
    return (reg.get("amendments") or [reg])[-1]["design"]


def design_hash(design: Any) -> str:
    """sha256 of ``json.dumps(design, sort_keys=True)``: what a look judged, what was registered."""
    return hashlib.sha256(json.dumps(design, sort_keys=True, default=str).encode()).hexdigest()


def _design_ok(d: Any) -> bool:
    return (isinstance(d, Mapping) and isinstance(d.get("design"), Mapping)
            and isinstance(d["design"].get("run_ids"), list) and all(isinstance(r, str) for r in d["design"]["run_ids"]))


def problem(data: Any) -> str | None:
    """What is wrong with claims.json's content ``data`` (None when it has the written shape)."""
    if not isinstance(data, Mapping):
        return f"not a JSON object ({type(data).__name__})"
    reg = data.get("registration")
    if reg is not None:
        if not _design_ok(reg):
            return "its registration has no design with a list of run ids"
        amendments = reg.get("amendments", [])
        if not isinstance(amendments, list) or not all(_design_ok(a) for a in amendments):
            return "its registration's amendments are not designs"
    looks = data.get("looks")
    if looks is not None and (not isinstance(looks, list) or not all(isinstance(x, Mapping) for x in looks)):
        return "its looks are not a list of records"
    return None


def read(path: str | Path) -> dict:
    """``claims.json`` as written, {} when there is none; ConfigError naming the file and what is
    wrong when it cannot be read or has another shape (:func:`problem`)."""
    path = Path(path)
    if not path.is_file():
        return {}
    try:
        data = json.loads(path.read_bytes())
    except (OSError, ValueError) as e:  # torn, not UTF-8, not JSON
        raise ConfigError(f"{path} cannot be read ({type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''})") \
            from None
    why = problem(data)
    if why:
        raise ConfigError(f"{path} is corrupt: {why}")
    return dict(data)


def set_aside(path: str | Path, now: float | None = None) -> Path:
    """Rename a corrupt ``claims.json`` to ``claims.corrupt-<UTC time>.json`` beside it (a suffix
    added if that name is taken) and return the new path: nothing is overwritten or lost."""
    path = Path(path)
    stamp = time.strftime("%Y%m%dT%H%M%SZ", time.gmtime(now))
    for n in range(1000):
        kept = path.with_name(f"{CORRUPT_PREFIX}{stamp}{f'-{n}' if n else ''}.json")
        if not kept.exists():
            path.rename(kept)
            return kept
    raise ConfigError(f"{path}: too many corrupt copies beside it already")
