"""Shared test settings: offline, quiet, small thread counts (the suite runs on 2 cores).
Shared helpers live in tests/helpers.py (this directory is on sys.path for every test)."""

import os

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


@pytest.fixture(autouse=True)
def _environment_as_it_was():
    """Each test starts from the suite's environment: an in-process CLI call (esopt.cli.common's
    quiet() sets PYTHONWARNINGS and friends for the processes it starts) must not leak into the
    subprocesses of later tests."""
    saved = dict(os.environ)
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"
