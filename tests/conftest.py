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


@pytest.fixture
def dev():
    """The wgpu device (lavapipe in CI); skips with the reason when no usable adapter exists.

    Function-scoped on purpose: ``Device.get()`` is cached, and after a device-loss test it hands out
    the replacement, so no later test inherits a lost device.
    """
    from oxigpu.backends.wgpu.device import Device
    from oxigpu.errors import DeviceError
    try:
        return Device.get()
    except DeviceError as e:
        pytest.skip(str(e))
