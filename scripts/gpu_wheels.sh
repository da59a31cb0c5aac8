#!/usr/bin/env bash
# Download the wheels that scripts/gpu_check.sh installs on a GPU machine without network: esopt's
# dependencies that such a machine's image lacks (scripts/gpu_check.sh's header says which and
# why), for its Python (3.12) on manylinux x86_64, into a git-ignored folder (.gitignore: /.whl/).
#   bash scripts/gpu_wheels.sh                 # -> .whl/ (about 7 MB)
#   bash scripts/gpu_wheels.sh DIR [PYVER]     # another folder or Python (3.11: the CPU rehearsal
#                                              # of docs/gpu_check.md)
# Versions are the ones CI tests esopt with, each compatible with the machine's own packages
# (transformers 5.17, huggingface_hub 1.33, accelerate 1.15, torch 2.11). Every wheel is pure
# Python except multiprocess and SQLAlchemy (one per Python version); antlr4-python3-runtime 4.9.3 (hydra-core's
# parser, pinned by it) is published only as source and is built into a wheel here.
set -euo pipefail
cd "$(dirname "$0")/.."
DIR=${1:-.whl}
PYVER=${2:-3.12}
PY=${PYTHON:-python3}
# esopt's dependencies (pyproject.toml) that the GPU image has, and those left behind on purpose
# (scripts/gpu_check.sh's header says why); tests/test_gpu_check.py checks that every dependency
# is in one of the three lists
IMAGE_HAS=(torch transformers tokenizers safetensors accelerate pandas pyarrow scipy numpy tqdm)
NOT_CARRIED=(plotly)
WHEELS=(
  hydra-core==1.3.8 omegaconf==2.3.1 hydra-submitit-launcher==1.2.0 hydra-joblib-launcher==1.2.0
  submitit==1.5.4
  optuna==5.1.0 alembic==1.20.1 mako==1.4.3 sqlalchemy==2.1.9 colorlog==6.12.0
  trl==1.16.0 datasets==5.2.0 dill==0.4.1 multiprocess==0.70.19
)
mkdir -p "$DIR"
rm -f "$DIR"/*.whl
export PIP_DISABLE_PIP_VERSION_CHECK=1
"$PY" -m pip download -q --no-deps --only-binary=:all: --python-version "$PYVER" --implementation cp \
  --abi "cp${PYVER/./}" --abi none --platform manylinux_2_28_x86_64 --platform manylinux_2_17_x86_64 \
  --platform manylinux2014_x86_64 -d "$DIR" "${WHEELS[@]}"
"$PY" -m pip wheel -q --no-deps --no-build-isolation -w "$DIR" antlr4-python3-runtime==4.9.3
n=$(ls "$DIR"/*.whl | wc -l)
[ "$n" -eq $(( ${#WHEELS[@]} + 1 )) ] || { echo "gpu_wheels: expected $(( ${#WHEELS[@]} + 1 )) wheels in $DIR, found $n" >&2; exit 1; }
echo "gpu_wheels: $n wheels, $(du -sh "$DIR" | cut -f1) in $DIR for Python $PYVER"
