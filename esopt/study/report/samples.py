"""What the models wrote, on the report page: base against final completions per run.

Every evaluation of a run keeps its completions in ``<run>/samples/iteration_<i>.json``
(``esopt.runtime.context.samples_path``; ``eval.save_samples`` problems in full). The page shows,
for the best configuration of each model, task and algorithm (``figures.best_groups``; its first
seed), the first problems' first completion before training (iteration 0) and after it (the
highest iteration recorded), with the extracted answer, the verdict, tokens and truncation,
and each evaluation's truncation rate beside its Pass@1. Every string is HTML-escaped: the
completions are model output.
"""

from __future__ import annotations

import html
import json
from pathlib import Path

from esopt.runtime.context import SAMPLES_DIR

SAMPLE_RUNS = 12        # runs shown (one per best configuration)
SAMPLE_PROBLEMS = 2     # problems shown per run
SAMPLE_CHARS = 600      # a shown completion's first this many characters


def malformed(data) -> str | None:
    """What is wrong with a samples file's content (None when it has the shape
    ``esopt.evaluator.write_samples`` writes: an object whose ``problems`` is a list of objects,
    whose ``truncated`` is null or a number and ``iteration`` null or an integer)."""
    if not isinstance(data, dict):
        return f"not a JSON object ({type(data).__name__})"
    if not isinstance(data.get("problems", []), list) or not all(isinstance(p, dict) for p in data.get("problems", [])):
        return "its problems are not a list of records"
    cut = data.get("truncated")
    if cut is not None and (isinstance(cut, bool) or not isinstance(cut, (int, float))):
        return f"its truncated is not a number ({cut!r})"
    it = data.get("iteration")
    if it is not None and (isinstance(it, bool) or not isinstance(it, int)):
        return f"its iteration is not an integer ({it!r})"
    return None


def read_samples(run_dir: Path, notes: list | None = None) -> tuple[dict | None, dict | None]:
    """(base, final) samples files of a run: iteration 0 and the highest other iteration
    (None where there is none or it cannot be read). A file that cannot be read, or has another
    shape (:func:`malformed`), is left out with one line appended to ``notes``."""
    files = {}
    for f in (Path(run_dir) / SAMPLES_DIR).glob("iteration_*.json"):
        tail = f.stem.rpartition("_")[2]
        if tail.isdigit():
            files[int(tail)] = f

    def load(i):
        if i not in files:
            return None
        try:
            data = json.loads(files[i].read_text(encoding="utf-8"))
            why = malformed(data)
        except (OSError, ValueError) as e:
            why = f"{type(e).__name__}: {str(e).splitlines()[0] if str(e) else ''}"
        if why and notes is not None:
            notes.append(f"{files[i]} cannot be read ({why}); its completions are not shown")
        return None if why else data

    later = [i for i in files if i > 0]
    return load(0), (load(max(later)) if later else None)


def _cell(c: dict | None) -> str:
    if not isinstance(c, dict):
        return "<td>-</td>"
    text = str(c.get("text", ""))
    if len(text) > SAMPLE_CHARS:
        text = text[:SAMPLE_CHARS] + " [...]"
    verdict = "correct" if c.get("correct") else "wrong"
    cut = ", truncated" if c.get("truncated") else ""
    head = f"{verdict}, answer {c.get('extracted')!r}, {c.get('tokens')} tokens{cut}"
    return f"<td><small>{html.escape(head)}</small><pre>{html.escape(text)}</pre></td>"


def _rate(data: dict | None) -> str:
    if not data or data.get("truncated") is None:
        return "-"
    return f"{float(data['truncated']):.0%} truncated"


def samples_html(runs, groups: dict, runs_dir: Path | None, notes: list | None = None) -> str:
    """The page's completions section (``table-samples``), or "" when no run has samples; a
    samples file that cannot be read is one line in ``notes`` (:func:`read_samples`)."""
    if runs_dir is None:
        return ""
    rows = []
    for (model, task, algo), g in list(groups.items())[:SAMPLE_RUNS]:
        rid = g["run_ids"][0]
        base, final = read_samples(Path(runs_dir) / rid, notes)
        if base is None and final is None:
            continue
        probs = {p.get("id"): p for p in (final or {}).get("problems") or [] if isinstance(p, dict)}
        for p in ((base or final).get("problems") or [])[:SAMPLE_PROBLEMS]:
            if not isinstance(p, dict):
                continue
            after = probs.get(p.get("id"), {}) if final else {}
            first = lambda rec: (rec.get("completions") or [None])[0] if isinstance(rec, dict) else None  # noqa: E731
            label = (f"{rid} ({algo}, {model}, {task}); base {_rate(base)}, "
                     f"final {_rate(final)} (iteration {(final or {}).get('iteration', '-')})")
            rows.append(f"<tr><td><small>{html.escape(label)}</small></td>"
                        f"<td><small>{html.escape(str(p.get('id')))}<br>gold {html.escape(repr(p.get('gold')))}"
                        f"</small></td>{_cell(first(p) if base else None)}{_cell(first(after))}</tr>")
    if not rows:
        return ""
    return ('<section id="samples"><h2>Completions: base and final</h2>'
            "<p>The first sampled completion of the first problems, before training and after it, for the "
            "best configuration of each model and algorithm; all of them (eval.save_samples problems in "
            f"full) in &lt;run&gt;/{SAMPLES_DIR}/iteration_&lt;i&gt;.json. Truncated: cut at the token budget "
            "before the answer.</p>"
            '<table id="table-samples"><thead><tr><th>run</th><th>problem</th><th>base</th><th>final</th>'
            f'</tr></thead><tbody>{"".join(rows)}</tbody></table></section>\n')
