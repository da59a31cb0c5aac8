"""Shared test settings: offline, quiet, small thread counts (the suite runs on 2 cores)."""

import os
import subprocess
import sys
from pathlib import Path

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
# The tiny models are latency-bound: one thread per process is as fast and does not fight the
# subprocesses (sweeps, Slurm jobs, distributed ranks) some tests start for the 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)

REPO = Path(__file__).resolve().parent.parent
SHARED_DATA = REPO.parent / "shared" / "data"


def run_cli(*args: str, cwd=None, env=None, timeout=600) -> subprocess.CompletedProcess:
    """Run ``python -m <args>`` as a user would, capturing output."""
    full_env = dict(os.environ)
    full_env.update(env or {})
    return subprocess.run(
        [sys.executable, "-m", *args], cwd=cwd or REPO, env=full_env, capture_output=True,
        text=True, timeout=timeout,
    )


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"
