"""How quantized weights sit in GPU memory: GGUF's blocks, except where a block's size leaves its fields
only 2-byte aligned.

A Q6_K block is 210 bytes (ql, qh, scales: 208 bytes, then the f16 d), Q8_0 34 and Q4_0 18 (the f16 d, then
qs), so every other block starts 2 bytes into a word and each word of it costs two loads and a funnel
shift. On the GPU the blocks go in pairs, counted from the tensor's first block, as
``[body 0][d 0][d 1][body 1]`` (body: the block less its d): each block keeps GGUF's bytes (block i at
``QB i`` of the tensor), the one that starts word-aligned with its d last, the other with its d first. A
kernel that computed ``blk`` (a block's byte offset in GGUF's layout, within a binding at a 4-aligned
offset) finds its body 4-aligned at ``(blk + 2) & ~3`` and both d's in the word between the bodies, the
upper half for odd blocks (``blk & 2``): common/dequant.wgsl ``pair_body`` / ``pair_dword``; loaders that read
a block's words whole take its body and d by its parity (gemm_mma/q32r_put.wgsl ``block_q32``).
An odd block count gets one zero block appended. The numpy backend reads GGUF's layout; only uploads to the
GPU go through :func:`gpu_layout`.
"""
from __future__ import annotations

import numpy as np

PAIRED = {"Q6_K": 210, "Q8_0": 34, "Q4_0": 18}
"""Block types stored as pairs on the GPU, with their block bytes (d: an f16 at the block's start or end)."""

D_FIRST = ("Q8_0", "Q4_0")
"""The paired types whose d starts the block (the rest: it ends it)."""

SPAN_PAD = 2 * max(PAIRED.values())
"""Bytes a weight binding reaches past its rows: a pair's d words follow its second body, so the last block
of a tensor with an odd block count finds its d in the pad block's place."""


def gpu_bytes(qtype: str, nbytes: int) -> int:
    """Device bytes of a tensor of ``nbytes`` GGUF bytes of ``qtype``."""
    qb = PAIRED.get(qtype)
    return nbytes if qb is None else -(-nbytes // (2 * qb)) * 2 * qb


def gpu_layout(data: np.ndarray, qtype: str) -> np.ndarray:
    """``data`` (a tensor's GGUF bytes, any shape) as the GPU holds it: unchanged unless ``qtype`` is in
    :data:`PAIRED`, else its blocks in pairs as the module says (a new flat uint8 array)."""
    qb = PAIRED.get(qtype)
    if qb is None:
        return data
    raw = np.ascontiguousarray(data).view(np.uint8).reshape(-1)
    if raw.size % qb:
        raise ValueError(f"{qtype} data of {raw.size} bytes is not a whole number of {qb}-byte blocks")
    if raw.size % (2 * qb):
        raw = np.concatenate([raw, np.zeros(qb, np.uint8)])
    # a pair as a record of its four fields: each field's copy is one strided loop of whole fields
    b = qb - 2
    src = np.dtype({"names": ["d0", "b0", "d1", "b1"] if qtype in D_FIRST else ["b0", "d0", "b1", "d1"],
                    "formats": ["V2", f"V{b}", "V2", f"V{b}"] if qtype in D_FIRST else [f"V{b}", "V2", f"V{b}", "V2"],
                    "offsets": [0, 2, qb, qb + 2] if qtype in D_FIRST else [0, b, qb, qb + b], "itemsize": 2 * qb})
    dst = np.dtype({"names": ["b0", "d0", "d1", "b1"], "formats": [f"V{b}", "V2", "V2", f"V{b}"],
                    "offsets": [0, b, qb, qb + 2], "itemsize": 2 * qb})
    p, out = raw.view(src), np.empty(raw.size // (2 * qb), dst)
    for f in ("b0", "d0", "d1", "b1"):
        out[f] = p[f]
    return out.view(np.uint8)
