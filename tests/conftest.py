"""Shared fixtures: synthetic tiny models, real model files (skipped with a reason when their packages are
absent) and the wgpu device."""
from __future__ import annotations

import os

import pytest

os.environ.setdefault("LP_NUM_THREADS", "1")


@pytest.fixture(scope="session")
def tiny_models(tmp_path_factory) -> dict[str, str]:
    """One synthetic GGUF file per tiny shape (every architecture; random weights, real vocab machinery), by
    shape name (tiny-llama, tiny-qwen2, ..., tiny-qwen3moe, tiny-bert: oxigpu.synth.SHAPES)."""
    from oxigpu.synth import SHAPES, synthesize
    out = tmp_path_factory.mktemp("tiny")
    return {name: str(synthesize(name, out / f"{name}.gguf", seed=7).path)
            for name in SHAPES if name.startswith("tiny-")}


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


@pytest.fixture(scope="session")
def nomic_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.nomic_embed_v15()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.fixture(scope="session")
def smollm2_path():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    locate = getattr(model_packages, "smollm2_135m", None)
    if locate is None:   # the locator arrives with the default-model work (model_packages.smollm2_135m)
        pytest.skip("model_packages.smollm2_135m is not in this tree")
    try:
        return locate()
    except ModelNotFoundError as e:
        pytest.skip(str(e))
