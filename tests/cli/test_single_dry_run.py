"""``sweep.dry_run=true`` without ``-m`` launches nothing: it names the run and its state (it used
to train the run)."""

import subprocess
import sys


def test_single_run_dry_run_trains_nothing(tmp_path):
    cmd = [sys.executable, "-m", "esopt.sweep", "model=tiny-xs", "algo=es", "pop=4", "iterations=2",
           "eval.problems=4", "eval.samples=2", "engine=auto", "sweep.dry_run=true", f"sweep.root={tmp_path}", "sweep.name=d"]
    out = subprocess.run(cmd, capture_output=True, text=True, timeout=300, cwd=tmp_path)
    assert out.returncode == 0, out.stderr
    assert "esopt: dry run: run " in out.stdout and "not started; nothing launched" in out.stdout
    assert "engine=hf es=full-rank)" in out.stdout             # the engine engine=auto picked here (no GPU)
    assert not (tmp_path / "d" / "runs").exists()  # no run directory, no summary, no weights
