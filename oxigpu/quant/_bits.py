"""Helpers shared by the numpy dequantizers: reading f16 scale fields and unpacking bit fields.

Every kernel has the signature `kernel(blocks, out)`: `blocks` is a (n, type_size) uint8 view,
`out` a (n, block_size) float32 array to fill. Kernels write through `out=` arguments so that a
chunk of blocks stays in cache between passes; that, not clever indexing, is what makes numpy fast.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

Kernel = Callable[[np.ndarray, np.ndarray], None]


def f16_field(blocks: np.ndarray, offset: int) -> np.ndarray:
    """The little-endian f16 at byte `offset` of every block, as a (n, 1) float32 column."""
    return blocks[:, offset:offset + 2].copy().view(np.float16).astype(np.float32)


def bit_planes(src: np.ndarray, bits: int) -> np.ndarray:
    """Split bytes into 8 // bits planes: plane k holds (src >> k*bits) & mask.

    src (..., m) uint8 -> (..., 8 // bits, m) uint8. ggml packs 2-, 4- and 1-bit fields this way
    (plane-major), so the result is already in element order for most layouts.
    """
    planes = 8 // bits
    mask = (1 << bits) - 1
    out = np.empty(src.shape[:-1] + (planes, src.shape[-1]), np.uint8)
    for k in range(planes):
        plane = out[..., k, :]
        np.right_shift(src, k * bits, out=plane)
        if k < planes - 1:
            np.bitwise_and(plane, mask, out=plane)
    return out


def scale_into(out: np.ndarray, q: np.ndarray, scale: np.ndarray) -> np.ndarray:
    """out = float32(q) * scale; q is shaped like a grouping of out, scale broadcasts over it.

    Returns out viewed with q's shape, so callers can apply a per-group offset in place.
    """
    o = out.reshape(q.shape)
    o[...] = q
    o *= scale
    return o


def pack_planes(planes: np.ndarray, bits: int) -> np.ndarray:
    """Inverse of `bit_planes`: (..., P, m) small unsigned values -> (..., m) bytes."""
    out = planes[..., 0, :].astype(np.uint8)
    for k in range(1, planes.shape[-2]):
        out |= (planes[..., k, :] << (k * bits)).astype(np.uint8)
    return out
