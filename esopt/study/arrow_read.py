"""The runs table's fast path: Arrow's C++ JSON reader over a whole chunk of runs.

The pure-Python reader (``esopt.study.run_read``) is the reference and the fallback: any
chunk Arrow cannot read exactly is re-read by it (``esopt.study.tables``). Nested columns are
flattened column-wise with the same naming rules as :func:`esopt.study.run_read.flatten`.
"""

from __future__ import annotations

import json

import numpy as np
import pyarrow as pa
import pyarrow.compute as pc

from esopt.study.run_read import METRICS_LISTS, NUMERIC_ID_COLUMNS, REQUIRED, SUMMARY_LISTS, drop_lists

ARROW_BLOCK = 1 << 22    # bytes per block of Arrow's JSON reader (a chunk's summaries or lines)


def _arrow_flat(prefix: str, key: str, arr, out: dict) -> None:
    """Arrow twin of :func:`flatten` for one column (same naming rules)."""
    t = arr.type
    if pa.types.is_struct(t):
        for i in range(t.num_fields):
            child, sub = pc.struct_field(arr, [i]), t.field(i).name
            if key.endswith("@k"):
                if not (pa.types.is_struct(child.type) or pa.types.is_list(child.type)):
                    out.setdefault(f"{prefix}{key[:-1]}{sub}", child)
            elif key.endswith("@k_ci"):
                _arrow_pair(f"{prefix}{key[:-4]}{sub}", child, out)
            else:
                _arrow_flat(f"{prefix}{key}.", sub, child, out)
    elif pa.types.is_list(t) or pa.types.is_large_list(t):
        if key.endswith("_ci"):
            _arrow_pair(f"{prefix}{key[:-3]}", arr, out)
    else:
        out.setdefault(prefix + key, arr.cast(pa.float64()) if pa.types.is_null(t) else arr)


def _arrow_struct(prefix: str, arr, out: dict) -> None:
    """Flatten a struct column's fields with ``prefix`` (like ``flatten(d, prefix)``)."""
    for i in range(arr.type.num_fields):
        _arrow_flat(prefix, arr.type.field(i).name, pc.struct_field(arr, [i]), out)


def _arrow_pair(name: str, arr, out: dict) -> None:
    """[lo, hi] list column -> name_lo, name_hi (dropped unless every list has two items)."""
    if not pa.types.is_list(arr.type):
        return
    n = pc.list_value_length(arr)
    if pc.all(pc.equal(n, 2)).as_py() in (True, None) and not pa.types.is_struct(arr.type.value_type):
        if pc.max(n).as_py() is None:
            return
        out.setdefault(f"{name}_lo", pc.list_element(arr, 0))
        out.setdefault(f"{name}_hi", pc.list_element(arr, 1))


_JSON_PARSE = None


def _read_json_lines(buf: bytes) -> pa.Table:
    import io
    import pyarrow.json as pj

    global _JSON_PARSE
    _JSON_PARSE = _JSON_PARSE or pj.ParseOptions(unexpected_field_behavior="infer")
    return pj.read_json(io.BytesIO(buf), read_options=pj.ReadOptions(block_size=ARROW_BLOCK),
                        parse_options=_JSON_PARSE)


def arrow_summaries(ids: list[str], raws: list[bytes]) -> pa.Table:
    """Summaries (one JSON object each) -> runs-table rows; raises if any is unusable."""
    # A JSON document has newlines only between tokens (strings escape them): one per line.
    tab = _read_json_lines(drop_lists(b"\n".join(r.replace(b"\n", b"").replace(b"\r", b"") for r in raws),
                                       SUMMARY_LISTS))
    if tab.num_rows != len(ids):
        raise ValueError("row count mismatch")
    cols = {c: tab.column(c) for c in tab.column_names}
    named = cols.get("run_id")                           # a copied folder: the Python path names it
    if named is not None and not pa.types.is_null(named.type):
        if not pa.types.is_string(named.type) or not pc.all(
                pc.or_kleene(pc.is_null(named), pc.equal(named, pa.array(ids, pa.string())))).as_py():
            raise ValueError("a summary names another run")
    for k in REQUIRED:
        if k not in cols or cols[k].null_count:
            raise ValueError(f"missing {k}")
    out: dict = {"run_id": pa.array(ids, pa.string()), "status": cols["status"], "error": cols.get("error")}
    model = cols["model"]
    if pa.types.is_struct(model.type):
        names = [model.type.field(i).name for i in range(model.type.num_fields)]
        if "name" not in names or pc.struct_field(model, [names.index("name")]).null_count:
            raise ValueError("missing model.name")
        out["algo"] = cols["algo"]
        task = cols.get("task")
        if task is not None and pa.types.is_struct(task.type):
            raise ValueError("task is a dict")  # rare: the Python path handles it
        out["task"] = task
        out["model"] = pc.struct_field(model, [names.index("name")])
        out["params"] = pc.struct_field(model, [names.index("params")]) if "params" in names else None
    else:
        raise ValueError("model is not a dict")
    for key in ("pop", "sigma", "lr", "seed", "iterations", "tokens_generated", "wall_s", "sweep"):
        out[key] = cols.get(key)
    for key in ("base", "final"):
        if key in cols and pa.types.is_struct(cols[key].type):
            _arrow_struct(f"{key}_", cols[key], out)
    if "phases" in cols and pa.types.is_list(cols["phases"].type):
        ph = cols["phases"]
        if not pa.types.is_struct(ph.type.value_type) and pc.max(pc.list_value_length(ph)).as_py():
            raise ValueError("phases of unexpected shape")
        ph = ph.combine_chunks() if isinstance(ph, pa.ChunkedArray) else ph
        lengths = pc.fill_null(pc.list_value_length(ph), 0)
        for i in range(pc.max(lengths).as_py() or 0):
            has = pc.greater(lengths, i)                   # runs with an i-th phase (sequences)
            el = pc.list_element(ph.filter(has), i)
            names = [el.type.field(j).name for j in range(el.type.num_fields)]
            leaves: dict = {}
            for f in ("algo", "iterations"):
                if f in names:
                    leaves[f"phase{i + 1}_{f}"] = pc.struct_field(el, [names.index(f)])
            if "eval" in names:
                _arrow_struct(f"phase{i + 1}_", pc.struct_field(el, [names.index("eval")]), leaves)
            for name, leaf in leaves.items():           # back to one value per run, null elsewhere
                leaf = leaf.combine_chunks() if isinstance(leaf, pa.ChunkedArray) else leaf
                out[name] = pc.replace_with_mask(pa.nulls(len(ph), leaf.type), has, leaf)
    skip = set(out) | {"base", "final", "phases", "config", "model", "task", "run_id"}
    for key, arr in cols.items():
        if key not in skip:
            _arrow_flat("", key, arr, flat := {})
            for k, v in flat.items():
                out.setdefault(k, v)
    out = {k: v for k, v in out.items() if v is not None}
    for k in NUMERIC_ID_COLUMNS:  # a string (or bool) in one summary: the Python path skips it
        if k in out and not (pa.types.is_integer(out[k].type) or pa.types.is_floating(out[k].type)
                             or pa.types.is_null(out[k].type)):
            raise ValueError(f"{k} is not numeric")
    return pa.table(out)


def arrow_curves(ids: list[str], blobs: list[bytes]) -> tuple[pa.Table, list[int], list[int]]:
    """metrics.jsonl contents -> curves table (+ lines per run, torn lines dropped per run)."""
    parts, counts, bad = [], [], []
    for data in blobs:
        nbad = 0
        if data and not data.endswith(b"\n"):                    # a torn last line?
            cut = data.rfind(b"\n") + 1
            try:
                json.loads(data[cut:])
                data += b"\n"
            except ValueError:
                data, nbad = data[:cut], 1
        if data.startswith(b"\n") or b"\n\n" in data or b"\r" in data:   # blank lines: normalise
            data = b"".join(ln + b"\n" for ln in data.split(b"\n") if ln.strip())
        parts.append(data)
        counts.append(data.count(b"\n"))
        bad.append(nbad)
    total = sum(counts)
    if not total:
        return pa.table({}), counts, bad
    tab = _read_json_lines(drop_lists(b"".join(parts), METRICS_LISTS))
    if tab.num_rows != total:
        raise ValueError("row count mismatch")
    out = {"run_id": pa.array(np.repeat(np.array(ids, dtype=object), counts).tolist(), pa.string()),
           "line": pa.array(np.concatenate([np.arange(c) for c in counts]), pa.int64())}
    for key in tab.column_names:
        _arrow_flat("", key, tab.column(key), out)
    return pa.table(out), counts, bad
