"""How quantized weights sit in GPU memory: GGUF's blocks, except where a block's size leaves its fields
only 2-byte aligned.

A Q6_K block is 210 bytes (ql, qh, scales: 208 bytes, then the f16 d), Q3_K 110 (likewise), Q8_0 34, Q5_0
22, Q4_0 and IQ4_NL 18 (the f16 d, then the rest), so every other block starts 2 bytes into a word and each
word of it costs two loads and a funnel shift. On the GPU the blocks go in pairs, counted from the tensor's
first block, as ``[body 0][d 0][d 1][body 1]`` (body: the block less its d): each block keeps GGUF's bytes (block i at
``QB i`` of the tensor), the one that starts word-aligned with its d last, the other with its d first. A
kernel that computed ``blk`` (a block's byte offset in GGUF's layout, within a binding at a 4-aligned
offset) finds its body 4-aligned at ``(blk + 2) & ~3`` and both d's in the word between the bodies, the
upper half for odd blocks (``blk & 2``): common/dequant.wgsl ``pair_body`` / ``pair_dword``; loaders that read
a block's words whole take its body and d by its parity (gemm_mma/q32r_put.wgsl ``block_q32``).
An odd block count gets one zero block appended. The numpy backend reads GGUF's layout. The backend writes
GGUF's bytes and pairs them on the device (:func:`pair_on_device`, no host copy of the weights);
:func:`gpu_layout` makes the same bytes on the host (the tests' and the dev tools' uploads).
"""
from __future__ import annotations

from typing import Any

import numpy as np

from .device import Dispatch

PAIRED = {"Q6_K": 210, "Q3_K": 110, "Q8_0": 34, "Q4_0": 18, "Q5_0": 22, "IQ4_NL": 18}
"""Block types stored as pairs on the GPU, with their block bytes (d: an f16 at the block's start or end)."""

D_FIRST = ("Q8_0", "Q4_0", "Q5_0", "IQ4_NL")
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


def pair_on_device(dev: Any, buf: Any, qtype: str, nbytes: int) -> None:
    """Pair in place the ``nbytes`` GGUF bytes of ``qtype`` already written at the start of ``buf`` (a buffer
    of :func:`gpu_bytes` bytes, zero past them), as :func:`gpu_layout` would (shaders/layout/pair_blocks.wgsl).
    Submitted after the writes, so the queue runs it after them."""
    qb = PAIRED[qtype]
    if nbytes % qb:
        raise ValueError(f"{qtype} data of {nbytes} bytes is not a whole number of {qb}-byte blocks")
    pipe = dev.pipeline("layout/pair_blocks.wgsl", defines={"QB": qb, "D_FIRST": qtype in D_FIRST})
    pairs = -(-nbytes // (2 * qb))
    # bindings of whole pairs within the binding limit; 64 pairs (128 qb bytes) are a multiple of 256 bytes
    step = max(1, dev.max_storage_binding // (128 * qb)) * 64
    dispatches = []
    for first in range(0, pairs, step):
        n = min(step, pairs - first)
        pipe_bg = dev.bind_group(pipe, {0: (buf, first * 2 * qb, n * 2 * qb), 1: dev.uniform([n, 0, 0, 0])})
        dispatches.append(Dispatch(pipe, pipe_bg, (min(-(-n // 256), 65535), 1, 1)))
    dev.submit(dispatches)
