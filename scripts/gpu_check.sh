#!/usr/bin/env bash
# esopt on one CUDA GPU in one command, without network, within 8 minutes on one H200
# (docs/gpu_check.md says how to run it on a lent GPU machine in one call):
#   bash scripts/gpu_check.sh OUTDIR          # on a GPU machine, after scripts/gpu_wheels.sh here
#   bash scripts/gpu_check.sh OUTDIR --cpu    # the same steps on the CPU at tiny sizes (CI's smoke run)
# Steps, each logged under OUTDIR (at most 6 files, none in subfolders):
#   1. install the wheels in $ESOPT_WHEELS (default .whl/) into a private folder put on PYTHONPATH
#      (pip --no-index --no-deps: nothing is fetched); record the Python packages (packages.txt);
#   2. the CUDA tests, python -m pytest -m cuda tests/test_cuda.py (ESOPT_REQUIRE_CUDA=1: a skip
#      for want of a GPU fails; --cpu: ESOPT_GPU_CHECK_CPU=1 runs them on the CPU);
#   3. benchmarks/bench_gpu.py --out OUTDIR: gpu.md (stamped; copy it to docs/results/gpu.md) and
#      gpu.json (--cpu: tiny sizes, never docs/results);
#   4. a summary: each step's exit code and seconds, the table (summary.txt, also printed last).
# Exit 0 only when every step passed. ESOPT_COMMIT stamps the table where the tree has no git.
#
# What the GPU machine lacks. Its image (the device notes' package list: Python 3.12, torch 2.11,
# transformers 5.17, huggingface_hub 1.33, accelerate 1.15, tokenizers, safetensors, peft,
# pandas, pyarrow, scipy, numpy, tqdm, pyyaml, joblib, cloudpickle, xxhash, fsspec, jinja2, psutil,
# narwhals, pytest, pytest-timeout, pytest-xdist) has all of esopt's dependencies (pyproject.toml)
# but these, which scripts/gpu_wheels.sh downloads (15 wheels, 7.6 MB):
#   datasets        + dill, multiprocess
#   hydra-core      + omegaconf, antlr4-python3-runtime (source only on PyPI: built into a wheel)
#   optuna          + alembic, mako, sqlalchemy, colorlog
#   submitit, hydra-submitit-launcher, hydra-joblib-launcher
#   trl
# Not carried: plotly (a 9.7 MB wheel; only the aggregate's report page, esopt/study/report/page.py,
# imports it, and nothing here makes one) and vLLM (its CUDA build is gigabytes: engine=vllm is
# not checked here). Checked on the CPU with only these wheels on top of those packages
# (docs/gpu_check.md, "rehearsal").
set -uo pipefail
cd "$(dirname "$0")/.."
[ $# -ge 1 ] || { echo "esopt: error: usage: bash scripts/gpu_check.sh OUTDIR [--cpu]" >&2; exit 2; }
OUT=$1
CPU=0
[ "${2:-}" = "--cpu" ] && CPU=1
[ $# -le 1 ] || [ "$CPU" = 1 ] || { echo "esopt: error: unknown option ${2}" >&2; exit 2; }
mkdir -p "$OUT" && OUT=$(cd "$OUT" && pwd)
PY=${PYTHON:-python3}
WHEELS=${ESOPT_WHEELS:-.whl}
export HF_HUB_OFFLINE=1 HF_DATASETS_OFFLINE=1 TRANSFORMERS_OFFLINE=1 TOKENIZERS_PARALLELISM=false \
  PYTHONUNBUFFERED=1 PIP_DISABLE_PIP_VERSION_CHECK=1 PIP_ROOT_USER_ACTION=ignore
exec > >(tee "$OUT/log.txt") 2>&1
T0=$(date +%s)
: >"$OUT/summary.txt"
# step NAME SECONDS CMD...: run CMD under a time limit, append its exit code and seconds to the summary
step() {
  local name=$1 limit=$2 s rc
  shift 2
  echo "== gpu_check: $name"
  s=$(date +%s)
  timeout "$limit" "$@"
  rc=$?
  [ "$rc" -eq 124 ] && echo "gpu_check: $name stopped at its ${limit} s limit"
  printf '%-8s exit %3d  %4d s\n' "$name" "$rc" $(( $(date +%s) - s )) >>"$OUT/summary.txt"
  return "$rc"
}

SITE=$(mktemp -d)
if ls "$WHEELS"/*.whl >/dev/null 2>&1; then
  step install 30 "$PY" -m pip install -q --no-index --no-deps --no-compile --no-cache-dir --upgrade \
    --target "$SITE" "$WHEELS"/*.whl
  irc=$?
elif [ "$CPU" = 1 ]; then
  echo "gpu_check: no wheels in $WHEELS: the environment's own packages"
  irc=0
else
  echo "gpu_check: no wheels in $WHEELS (bash scripts/gpu_wheels.sh first, here)"
  irc=1
fi
export PYTHONPATH="$SITE:$PWD"
{ "$PY" -m pip list 2>/dev/null; command -v nvidia-smi >/dev/null && nvidia-smi; } >"$OUT/packages.txt"
"$PY" -c "import esopt.runtime.run, esopt.algorithms.grpo, esopt.cli.sweep, torch; print('gpu_check: esopt imports;',
  'torch', torch.__version__, 'CUDA', torch.cuda.is_available() and torch.cuda.get_device_name(0))" || irc=1

if [ "$CPU" = 1 ]; then
  export ESOPT_GPU_CHECK_CPU=1 OMP_NUM_THREADS=${OMP_NUM_THREADS:-1}
  bench=(--cpu)
else
  export ESOPT_REQUIRE_CUDA=1
  bench=()
fi
commit=${ESOPT_COMMIT:-$(git rev-parse --short HEAD 2>/dev/null)}
[ -n "$commit" ] && bench+=(--commit "$commit")
# -o addopts=: one process, none of the suite's xdist settings (the image's pytest may be newer)
step tests 150 "$PY" -m pytest -o addopts= -p no:cacheprovider -q -rs -m cuda --junitxml="$OUT/tests.xml" \
  tests/test_cuda.py
trc=$?
step bench 290 "$PY" benchmarks/bench_gpu.py --out "$OUT" "${bench[@]}"
brc=$?

echo "== gpu_check: summary ($(( $(date +%s) - T0 )) s in all; $([ "$CPU" = 1 ] && echo CPU smoke run || echo GPU))"
cat "$OUT/summary.txt"
[ -f "$OUT/gpu.md" ] && grep '^|' "$OUT/gpu.md" | tee -a "$OUT/summary.txt"
[ "$irc" -eq 0 ] && [ "$trc" -eq 0 ] && [ "$brc" -eq 0 ]
