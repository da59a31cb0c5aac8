"""Shared test settings: offline, quiet, small thread counts (the suite runs on 2 cores).
Shared helpers live in tests/helpers.py (this directory is on sys.path for every test)."""

import itertools
import os
import tempfile
import types

os.environ.setdefault("HF_HUB_OFFLINE", "1")
os.environ.setdefault("HF_DATASETS_OFFLINE", "1")
os.environ.setdefault("TRANSFORMERS_OFFLINE", "1")
os.environ.setdefault("TOKENIZERS_PARALLELISM", "false")
os.environ.setdefault("HF_DATASETS_DISABLE_PROGRESS_BARS", "1")
# The tiny models are latency-bound: one thread per process is as fast and does not fight the
# subprocesses (sweeps, Slurm jobs, distributed ranks) some tests start for the 2 cores.
os.environ.setdefault("OMP_NUM_THREADS", "1")
os.environ.setdefault("ESOPT_PROGRESS", "0")  # quiet: no progress lines (tests/core/test_progress.py turns them on)
# the looks ledger (esopt.study.claims.ledger) of the tests' sweeps stays out of the user's own: one per
# module (its module-scoped fixtures) and one per test below (a test's sweeps are not another's looks)
LOOKS_DIR = tempfile.mkdtemp(prefix="esopt-looks-")
os.environ["ESOPT_LOOKS"] = os.path.join(LOOKS_DIR, "looks.jsonl")

import pytest  # noqa: E402
import torch  # noqa: E402

torch.set_num_threads(1)


_LOOKS = itertools.count()


@pytest.fixture(autouse=True, scope="module")
def _module_looks():
    """A module's own looks ledger, set before its module-scoped fixtures (autouse runs first)."""
    saved = os.environ.get("ESOPT_LOOKS")
    os.environ["ESOPT_LOOKS"] = os.path.join(LOOKS_DIR, f"looks-{next(_LOOKS)}.jsonl")
    yield
    os.environ["ESOPT_LOOKS"] = saved


@pytest.fixture(autouse=True)
def _environment_as_it_was():
    """Each test starts from the suite's environment: an in-process CLI call (esopt.cli.common's
    quiet() sets PYTHONWARNINGS and friends for the processes it starts) must not leak into the
    subprocesses of later tests. Its own looks ledger (ESOPT_LOOKS, empty)."""
    saved = dict(os.environ)
    os.environ["ESOPT_LOOKS"] = os.path.join(LOOKS_DIR, f"looks-{next(_LOOKS)}.jsonl")
    yield
    if os.environ != saved:
        os.environ.clear()
        os.environ.update(saved)


@pytest.fixture
def results_root(tmp_path):
    return tmp_path / "results"


# pytest-xdist (pyproject's addopts: ``-n auto --dist loadgroup``) sends each group of tests to one
# worker and spreads the rest one test at a time. The tests of a file that share a module-scoped
# fixture (a trained model, a built wheel) are one group, so it is made once; files that share an
# outside service are one group, so that they never use it at once.
SHARED_SERVICE_GROUPS = {"test_slurm.py": "slurm", "test_slurm_faults.py": "slurm",
                         "test_postgres_storage.py": "postgres"}


def _module_scoped(item) -> bool:
    info = getattr(item, "_fixtureinfo", None)
    defs = info.name2fixturedefs.values() if info is not None else ()
    return any(d.scope in ("module", "class", "package") for fixturedefs in defs for d in fixturedefs)


@pytest.hookimpl(tryfirst=True)   # before xdist's own hook, which reads the marker into the node id
def pytest_collection_modifyitems(config, items):
    for item in items:
        if item.get_closest_marker("xdist_group") is not None:
            continue
        group = SHARED_SERVICE_GROUPS.get(item.path.name) or (str(item.path) if _module_scoped(item) else None)
        if group:
            item.add_marker(pytest.mark.xdist_group(group))


def pytest_configure(config):
    """--dist loadgroup sends a group to one worker by the ``@group`` suffix pytest-xdist writes
    into each grouped test's ``_nodeid``. pytest 9.2 reads node ids from elsewhere (with xdist 3.8),
    so groups silently spread over workers, and two of them once built one wheel in one tree at
    once. Check what xdist does, on a stand-in node, and stop with one line if it is lost."""
    if config.getoption("dist", "no") != "loadgroup" or hasattr(config, "workerinput"):
        return
    if not pytest.Item.nodeid.fget(types.SimpleNamespace(_nodeid="t@group", _id="t")).endswith("@group"):
        raise pytest.UsageError(f"pytest-xdist's --dist loadgroup does not group tests under pytest "
                                f"{pytest.__version__}: install pytest<9.2 (pyproject's test extra)")
