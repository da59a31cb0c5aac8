"""CI's own rules: a test that would skip for a service .ci/run starts fails there instead, and
the stage times and slowest tests CI prints are what benchmarks/bench_ci.py records."""

import re
import sys

import pytest
from helpers import REPO, require

sys.path.insert(0, str(REPO / "benchmarks"))
import bench_ci  # noqa: E402


def test_require_skips_with_the_reason_and_fails_where_the_service_is_required(monkeypatch):
    monkeypatch.delenv("ESOPT_REQUIRE_SLURM", raising=False)
    require("slurm", None)  # present: nothing happens
    with pytest.raises(pytest.skip.Exception, match="no Slurm node is up"):
        require("slurm", "no Slurm node is up")
    monkeypatch.setenv("ESOPT_REQUIRE_SLURM", "1")
    with pytest.raises(pytest.fail.Exception, match="ESOPT_REQUIRE_SLURM is set but no Slurm node is up"):
        require("slurm", "no Slurm node is up")
    monkeypatch.setenv("ESOPT_REQUIRE_SLURM", "0")  # 0: not required
    with pytest.raises(pytest.skip.Exception):
        require("slurm", "no Slurm node is up")


def test_ci_requires_every_service_and_stage_it_starts():
    """Each service .ci/run starts has its ESOPT_REQUIRE_<X> exported before the suite, and each
    gate the tests use is one of them, or the GPU check's (scripts/gpu_check.sh: CUDA, which CI's
    machine lacks): a new service needs both."""
    ci = (REPO / ".ci" / "run").read_text()
    smollm2 = (REPO / "scripts" / "ci_smollm2.sh").read_text()
    required = set(re.findall(r"ESOPT_REQUIRE_([A-Z0-9]+)=1", ci + smollm2))
    gpu_check = set(re.findall(r"ESOPT_REQUIRE_([A-Z0-9]+)=1", (REPO / "scripts" / "gpu_check.sh").read_text()))
    gates = set()
    for path in (REPO / "tests").rglob("*.py"):
        text = path.read_text()
        if " as require\n" in text:  # another helper under that name (test_smollm2.py's)
            continue
        gates |= {g.upper() for g in re.findall(r'require\("([a-z0-9]+)"', text)}
    assert gates and gates <= required | gpu_check, (gates, required, gpu_check)
    assert gpu_check == {"CUDA"}
    assert {"SLURM", "POSTGRES", "BROWSER", "VLLM", "SMOLLM2"} <= required
    assert "--durations=25" in ci


def test_bench_ci_reads_stage_times_durations_and_counts():
    times = "services\t0\t95\t0\nmain install\t0\t110\t0\nmain suite\t112\t530\t0\ntotal\t0\t1300\t0\n"
    assert bench_ci.parse_times(times) == [("services", 0, 95, 0), ("main install", 0, 110, 0),
                                           ("main suite", 112, 530, 0), ("total", 0, 1300, 0)]
    log = ("============================= slowest 25 durations ==============================\n"
           "41.20s call     tests/cli/test_sweeper.py::test_failing_run[a b]\n"
           "3.05s setup    tests/models/test_tiny_competence.py::test_larger_is_better\n"
           "97.51s call     tests/cli/test_packaging.py::test_installed_wheel_runs_outside_the_checkout"
           "@/check/tests/cli/test_packaging.py\n"
           "42.34s call     tests/cli/test_slurm.py::test_grid[a@b]@slurm\n"
           "=========== 740 passed, 37 skipped, 12 warnings in 421.77s (0:07:01) ============\n")
    assert bench_ci.parse_durations(log, n=3) == [
        (97.51, "call", "tests/cli/test_packaging.py::test_installed_wheel_runs_outside_the_checkout"),
        (42.34, "call", "tests/cli/test_slurm.py::test_grid[a@b]"),
        (41.2, "call", "tests/cli/test_sweeper.py::test_failing_run[a b]")]
    assert bench_ci.parse_summary(log) == "740 passed, 37 skipped, 12 warnings"
