"""The GPU's block layout (backends/wgpu/layout.py): Q6_K, Q3_K, Q8_0, Q5_0, Q4_0 and IQ4_NL blocks in pairs,
every field found where the shaders look for it (common/dequant.wgsl pair_body / pair_dword, the GEMV pieces,
gemm_mma/q32r_put.wgsl block_q32), the numbers of bytes, the odd-count pad, the pairing on the device."""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.backends.wgpu.layout import D_FIRST, PAIRED, gpu_bytes, gpu_layout, pair_on_device


def _shader_fields(gpu: np.ndarray, blk: int, qb: int) -> tuple[bytes, bytes]:
    """Block ``blk`` (GGUF byte offset) found in ``gpu`` as the shaders find it: its body at (blk + 2) & ~3, its
    d in the low half of word (blk + qb - 2) / 4 (even blocks) or the upper half of word (blk - 2) / 4 (odd)."""
    body = (blk + 2) & ~3
    word = (blk & ~3) + (0 if blk & 2 else qb - 2)
    half = 2 if blk & 2 else 0
    return gpu[body:body + qb - 2].tobytes(), gpu[word + half:word + half + 2].tobytes()


def _block_words(gpu: np.ndarray, blk: int, qb: int) -> tuple[bytes, bytes]:
    """(body, d) as gemm_mma/q32r_put.wgsl block_q32 takes them from the block's words (from the word holding
    its first byte): odd blocks words 1.. and the upper half of word 0, the others words 0.. and the last."""
    w = gpu[blk & ~3:(blk & ~3) + 4 * ((qb + 2) // 4)]
    return (w[4:qb + 2].tobytes(), w[2:4].tobytes()) if blk & 2 else (w[:qb - 2].tobytes(), w[qb - 2:qb].tobytes())


@pytest.mark.parametrize("qtype,qb", sorted(PAIRED.items()))
@pytest.mark.parametrize("nblocks", [1, 2, 5, 8])
def test_pairs_keep_every_field_where_the_shaders_read_it(qtype, qb, nblocks):
    raw = np.random.default_rng(nblocks).integers(0, 256, (nblocks, qb), dtype=np.uint8)
    gpu = gpu_layout(raw, qtype)
    assert gpu.dtype == np.uint8 and gpu.size == gpu_bytes(qtype, raw.nbytes) == 2 * qb * -(-nblocks // 2)
    d_first = qtype in D_FIRST
    for i in range(nblocks):
        body, d = _shader_fields(gpu, qb * i, qb)
        want_body, want_d = (raw[i, 2:], raw[i, :2]) if d_first else (raw[i, :-2], raw[i, -2:])
        assert body == want_body.tobytes() and d == want_d.tobytes(), i
        assert sorted(gpu[qb * i:qb * (i + 1)].tolist()) == sorted(raw[i].tolist())   # the block's own bytes
        if d_first:
            assert _block_words(gpu, qb * i, qb) == (want_body.tobytes(), want_d.tobytes())
    if nblocks % 2:   # the pad block: zeros
        body, d = _shader_fields(gpu, qb * nblocks, qb)
        assert body == bytes(qb - 2) and d == bytes(2)


def test_other_types_keep_ggufs_bytes():
    raw = np.arange(144 * 3, dtype=np.uint8)
    assert gpu_layout(raw, "Q4_K") is raw and gpu_bytes("Q4_K", raw.nbytes) == raw.nbytes
    assert set(PAIRED) == {"Q6_K", "Q3_K", "Q8_0", "Q5_0", "Q4_0", "IQ4_NL"}
    assert set(D_FIRST) == set(PAIRED) - {"Q6_K", "Q3_K"}


def test_partial_blocks_are_refused():
    with pytest.raises(ValueError, match="whole number of 210-byte blocks"):
        gpu_layout(np.zeros(300, np.uint8), "Q6_K")


@pytest.mark.gpu
@pytest.mark.parametrize("qtype", sorted(PAIRED))
@pytest.mark.parametrize("nblocks,limit", [(1, None), (2, None), (7, None), (1001, "small")])
def test_pairing_on_the_device_makes_the_hosts_bytes(dev, qtype, nblocks, limit):
    """The backend writes GGUF's bytes and pairs them in place on the device (pair_on_device); the result is
    gpu_layout's, byte for byte, also when the pairs are bound in several pieces (a small binding limit)."""
    qb = PAIRED[qtype]
    raw = np.random.default_rng(nblocks).integers(0, 256, nblocks * qb, dtype=np.uint8)
    buf = dev.create_buffer(gpu_bytes(qtype, raw.nbytes))
    dev.write(buf, raw)
    with dev.binding_limit(256 * qb if limit else dev.max_storage_binding):   # 128 pairs a binding
        pair_on_device(dev, buf, qtype, raw.nbytes)
    got = dev.read(buf, np.uint8, gpu_bytes(qtype, raw.nbytes))
    assert np.array_equal(got, gpu_layout(raw, qtype))
    with pytest.raises(ValueError, match="whole number"):
        pair_on_device(dev, buf, qtype, raw.nbytes - 1)
