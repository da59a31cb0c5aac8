"""scripts/gpu_check.sh --cpu: the GPU check's steps (wheel install, the cuda tests, the GPU
benchmark, the summary) on the CPU at tiny sizes, so that the script cannot rot between the rare
runs on a GPU; and the wheel list of scripts/gpu_wheels.sh against pyproject's dependencies."""

import os
import re
import subprocess
import tomllib

from helpers import REPO


def test_cpu_smoke_run_passes_every_step(tmp_path):
    """Starts the script (the subject is the script: its steps, exit code and files). The cuda
    tests run on the CPU there and pass (none skipped but the two-rank one, which says why), and
    the benchmark writes its stamped table, one row per measurement, to the output folder only."""
    out = tmp_path / "out"
    # no wheels: this environment's own packages (a checkout's .whl/ holds the GPU image's cp312 ones)
    env = {**os.environ, "ESOPT_WHEELS": str(tmp_path / "no-wheels")}
    proc = subprocess.run(["bash", "scripts/gpu_check.sh", str(out), "--cpu"], cwd=REPO, capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stdout[-3000:] + proc.stderr[-2000:]
    summary = (out / "summary.txt").read_text()
    assert re.findall(r"^(\w+)\s+exit\s+(\d+)", summary, re.M)[-2:] == [("tests", "0"), ("bench", "0")]
    junit = (out / "tests.xml").read_text()
    tests, skipped = (int(re.search(rf'{k}="(\d+)"', junit).group(1)) for k in ("tests", "skipped"))
    assert tests == 7 and skipped == 1 and 'failures="0"' in junit and 'errors="0"' in junit
    table = (out / "gpu.md").read_text()
    assert "- commit: " in table and "CPU smoke run" in table
    rows = [line for line in table.splitlines() if line.startswith("| cpu-smoke")]
    assert [r.split(" | ")[2] for r in rows] == ["generate", "es_members", "es_batched", "grpo_step"]
    assert all(float(r.split(" | ")[5]) > 0 for r in rows)  # generated tokens/s


def bash_list(text: str, name: str) -> set[str]:
    body = re.search(rf"^{name}=\((.*?)\)", text, re.S | re.M).group(1)
    return {re.split(r"[=<>\[]", w)[0].lower().replace("_", "-") for w in body.split() if not w.startswith("#")}


def test_every_dependency_is_on_the_image_carried_or_left_out_on_purpose():
    """A dependency added to pyproject.toml must be placed: on the GPU image, among the wheels
    scripts/gpu_wheels.sh downloads, or left behind with a reason (scripts/gpu_check.sh's header)."""
    deps = tomllib.loads((REPO / "pyproject.toml").read_text())["project"]["dependencies"]
    names = {re.split(r"[=<>\[ ]", d)[0].lower() for d in deps}
    script = (REPO / "scripts" / "gpu_wheels.sh").read_text()
    image, carried, left = (bash_list(script, n) for n in ("IMAGE_HAS", "WHEELS", "NOT_CARRIED"))
    assert not image & carried and names <= image | carried | left, names - image - carried - left
    header = (REPO / "scripts" / "gpu_check.sh").read_text()
    assert all(name in header for name in carried | left)
