"""Shared fixtures: real model files (skipped with a reason when their packages are absent)."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("LP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def gemma3_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.gemma3_270m()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def qwen_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.qwen25_coder_05b()
    except ModelNotFoundError as e:
        pytest.skip(str(e))
