"""A non-editable ``pip install .`` works: the wheel carries the Hydra configs (conf/, with the
presets) and the shipped tiny models, and the entry points run from outside the checkout."""

import os
import subprocess
import sys
import zipfile
from pathlib import Path

import pytest
from helpers import REPO


@pytest.fixture(scope="module")
def wheel(tmp_path_factory):
    out = tmp_path_factory.mktemp("wheel")
    proc = subprocess.run([sys.executable, "-m", "pip", "wheel", str(REPO), "--no-deps", "--no-build-isolation",
                           "-q", "-w", str(out)], capture_output=True, text=True, timeout=600)
    # a wheel that does not build is a packaging regression: a failure, never a skip
    assert proc.returncode == 0, f"pip wheel failed: {proc.stderr.strip()[-2000:]}"
    (whl,) = out.glob("esopt-*.whl")
    return whl


def test_wheel_ships_configs_presets_and_models(wheel):
    names = set(zipfile.ZipFile(wheel).namelist())
    for want in ("esopt/conf/config.yaml", "esopt/conf/algo/es.yaml", "esopt/conf/model/tiny-s.yaml",
                 "esopt/conf/hydra/launcher/slurm.yaml", "esopt/conf/experiment/quickstart.yaml",
                 "esopt/models/tiny/tiny-s/model.safetensors", "hydra_plugins/esopt_sweeper/sweepers.py"):
        assert want in names, want


def test_installed_wheel_runs_outside_the_checkout(wheel, tmp_path):
    """The wheel installed into a venv of its own runs from a temporary directory. That venv
    sees this environment's packages (torch, ...) through a .pth file naming this interpreter's
    site-packages, whether this interpreter is the system's or a venv's (a --system-site-packages
    venv made from a venv interpreter would see the base interpreter's packages instead), and
    its own copy of esopt comes first on the path, ahead of an editable install here."""
    venv = tmp_path / "venv"
    subprocess.run([sys.executable, "-m", "venv", "--without-pip", str(venv)], check=True, timeout=300)
    py = venv / "bin" / "python"
    own = subprocess.run([str(py), "-c", "import sysconfig; print(sysconfig.get_paths()['purelib'])"],
                         capture_output=True, text=True, check=True).stdout.strip()
    here = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and Path(p).is_dir()]
    (Path(own) / "_esopt_test_parent_env.pth").write_text(
        "".join(f"import site; site.addsitedir({p!r})\n" for p in here))
    env = {k: v for k, v in os.environ.items() if k != "PYTHONPATH"}  # not the checkout
    subprocess.run([str(py), "-m", "pip", "install", "-q", "--no-deps", "--ignore-installed", str(wheel)],
                   check=True, timeout=300, env=env)
    proc = subprocess.run([str(py), "-m", "esopt.evaluate", "model=tiny-xs", "eval.problems=4", "eval.samples=2",
                           f"sweep.root={tmp_path / 'results'}"], cwd=tmp_path, capture_output=True,
                          text=True, timeout=600, env=env)
    assert proc.returncode == 0, proc.stderr[-2000:]
    assert "pass@1" in proc.stdout
    where = subprocess.run([str(py), "-c", "import esopt; print(esopt.__file__)"], cwd=tmp_path,
                           capture_output=True, text=True, env=env).stdout
    assert where.startswith(own)  # the installed copy ran, not the checkout
