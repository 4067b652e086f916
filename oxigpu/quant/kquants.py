"""Dequantizers for ggml's 256-element K-quant super-blocks: Q2_K, Q3_K, Q4_K, Q5_K, Q6_K.

Layouts (ggml-common.h, in byte order):
  Q2_K  scales[16] (lo nibble scale, hi nibble min) | qs[64] 2-bit | d | dmin
  Q3_K  hmask[32] | qs[64] 2-bit | scales[12] (16 x 6-bit, offset 32) | d
  Q4_K  d | dmin | scales[12] (8 scales + 8 mins, 6-bit) | qs[128] 4-bit
  Q5_K  d | dmin | scales[12] | qh[32] | qs[128]
  Q6_K  ql[128] | qh[64] | scales[16] int8 | d
The per-sub-block factors are formed first (d * sc, dmin * m) and then applied, the same
float32 operation order as gguf.quants, so results are bit-identical to it.
"""
from __future__ import annotations

import numpy as np

from ._bits import Kernel, bit_planes, f16_field, scale_into


def _apply(out: np.ndarray, q: np.ndarray, dl: np.ndarray, ml: np.ndarray | None = None) -> None:
    """out = dl * q (- ml), with q (n, groups, group) and dl/ml (n, groups)."""
    o = scale_into(out, q, dl[:, :, None])
    if ml is not None:
        o -= ml[:, :, None]


def k4_scales(packed: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    """Unpack Q4_K/Q5_K's 12 bytes into 8 six-bit scales and 8 six-bit mins (get_scale_min_k4)."""
    a, b, c = packed[:, 0:4], packed[:, 4:8], packed[:, 8:12]
    sc = np.concatenate([a & 63, (c & 0xF) | ((a >> 6) << 4)], axis=1)
    mn = np.concatenate([b & 63, (c >> 4) | ((b >> 6) << 4)], axis=1)
    return sc, mn


def q3_scales(packed: np.ndarray) -> np.ndarray:
    """Unpack Q3_K's 12 bytes into 16 six-bit scales (still offset by 32)."""
    low = bit_planes(packed[:, :8], 4).reshape(-1, 16)
    high = bit_planes(packed[:, 8:12], 2).reshape(-1, 16)
    return low | (high << np.uint8(4))


def q2_k(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    sc = blocks[:, :16]
    d, dmin = f16_field(blocks, 80), f16_field(blocks, 82)
    q = bit_planes(blocks[:, 16:80].reshape(n, 2, 32), 2).reshape(n, 16, 16)
    _apply(out, q, d * (sc & 0xF).astype(np.float32), dmin * (sc >> 4).astype(np.float32))


def q3_k(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    d = f16_field(blocks, 108)
    sc = q3_scales(blocks[:, 96:108]).view(np.int8) - np.int8(32)
    q = bit_planes(blocks[:, 32:96].reshape(n, 2, 32), 2).reshape(n, 256)
    hi = bit_planes(blocks[:, :32], 1).reshape(n, 256)
    q = q.view(np.int8)
    q -= (hi ^ np.uint8(1)).view(np.int8) << np.int8(2)  # a clear high bit means "minus 4"
    _apply(out, q.reshape(n, 16, 16), d * sc.astype(np.float32))


def _k4_factors(blocks: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    sc, mn = k4_scales(blocks[:, 4:16])
    return (f16_field(blocks, 0) * sc.astype(np.float32),
            f16_field(blocks, 2) * mn.astype(np.float32))


def q4_k(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    q = bit_planes(blocks[:, 16:].reshape(n, 4, 32), 4).reshape(n, 8, 32)
    _apply(out, q, *_k4_factors(blocks))


def q5_k(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    q = bit_planes(blocks[:, 48:].reshape(n, 4, 32), 4).reshape(n, 8, 32)
    q |= bit_planes(blocks[:, 16:48], 1) << np.uint8(4)
    _apply(out, q, *_k4_factors(blocks))


def q6_k(blocks: np.ndarray, out: np.ndarray) -> None:
    n = blocks.shape[0]
    q = bit_planes(blocks[:, :128].reshape(n, 2, 64), 4).reshape(n, 2, 4, 32)
    q |= bit_planes(blocks[:, 128:192].reshape(n, 2, 32), 2) << np.uint8(4)
    q = q.view(np.int8)
    q -= np.int8(32)
    dl = f16_field(blocks, 208) * blocks[:, 192:208].view(np.int8).astype(np.float32)
    _apply(out, q.reshape(n, 16, 16), dl)


DEQUANT: dict[str, Kernel] = {"Q2_K": q2_k, "Q3_K": q3_k, "Q4_K": q4_k, "Q5_K": q5_k, "Q6_K": q6_k}
