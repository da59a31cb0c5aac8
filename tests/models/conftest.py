"""The real model's converted cache, shared by tests/models/test_smollm2*.py."""

import os
from pathlib import Path

import pytest
from helpers import require_smollm2

from esopt.models import smollm2


@pytest.fixture(scope="session")
def real_cache(tmp_path_factory):
    """A cache holding the real conversion, made by the first test using it: in a fresh folder
    per session, or in ``ESOPT_TEST_SMOLLM2_CACHE`` (scripts/ci_smollm2.sh: one fresh folder
    for its two pytest sessions, so the vLLM venv's tests reuse the main venv's conversion)."""
    require_smollm2("gguf", package=True)
    shared = os.environ.get("ESOPT_TEST_SMOLLM2_CACHE")
    root = Path(shared) if shared else tmp_path_factory.mktemp("esopt-cache")
    smollm2._FOLDERS.clear()
    return root, smollm2.folder(root=root)
