"""The GPU's block layout (backends/wgpu/layout.py): Q6_K blocks in pairs, every field found where the shaders
look for it (quant/q6_k.wgsl q6_body / q6_dword, gemv/q6_k.wgsl), the numbers of bytes, the odd-count pad."""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.backends.wgpu.layout import PAIRED, gpu_bytes, gpu_layout


def _shader_fields(gpu: np.ndarray, blk: int) -> tuple[bytes, bytes]:
    """Block ``blk`` (GGUF byte offset) found in ``gpu`` as the shaders find it: 208 body bytes at blk & ~3,
    the d half of word ((blk & ~3) + (208 if odd else 416)) / 4."""
    body = blk & ~3
    word = body + (208 if blk & 2 else 416)
    half = 2 if blk & 2 else 0
    return gpu[body:body + 208].tobytes(), gpu[word + half:word + half + 2].tobytes()


@pytest.mark.parametrize("nblocks", [1, 2, 7, 8])
def test_q6_k_pairs_keep_every_field_where_the_shaders_read_it(nblocks):
    raw = np.random.default_rng(nblocks).integers(0, 256, (nblocks, 210), dtype=np.uint8)
    gpu = gpu_layout(raw, "Q6_K")
    assert gpu.dtype == np.uint8 and gpu.size == gpu_bytes("Q6_K", raw.nbytes) == 420 * -(-nblocks // 2)
    for i in range(nblocks):
        body, d = _shader_fields(gpu, 210 * i)
        assert body == raw[i, :208].tobytes() and d == raw[i, 208:].tobytes(), i
        assert (210 * i & ~3) % 4 == 0
    if nblocks % 2:   # the pad block: zeros
        body, d = _shader_fields(gpu, 210 * nblocks)
        assert body == bytes(208) and d == bytes(2)


def test_other_types_keep_ggufs_bytes():
    raw = np.arange(144 * 3, dtype=np.uint8)
    assert gpu_layout(raw, "Q4_K") is raw and gpu_bytes("Q4_K", raw.nbytes) == raw.nbytes
    assert set(PAIRED) == {"Q6_K"}


def test_partial_blocks_are_refused():
    with pytest.raises(ValueError, match="whole number of 210-byte blocks"):
        gpu_layout(np.zeros(300, np.uint8), "Q6_K")
