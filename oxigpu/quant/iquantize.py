"""ggml's IQ4_NL and IQ4_XS quantizers (`quantize_row_iq4_nl_impl` without importance weights), vectorized.

The same scheme as kquantize.py: a group of 32 weights over G groups is an element-major (32, G) array,
each scalar statement of the C code one numpy operation on G values in ggml's float32 order, sums left
to right, skipped groups computed and masked. The result is ggml's bytes (tests/test_quant_ggml.py
checks them against ggml's own on its fixture). With these, `oxigpu synth` writes IQ4_XS files in
seconds and the GPU benches need no llama-quantize.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._bits import pack_planes
from .iquants import KVALUES
from .kquantize import GROUP_MAX_EPS, F, _f16, _f16_bytes, nearest_int, seqsum

_NTRY = 7   # ggml_quantize_chunk's tries for both types (quantize_row_iq4_nl_ref passes -1)


def best_index(v: np.ndarray) -> np.ndarray:
    """ggml's best_index_int8 over the codebook: the nearer of the two entries around v (the lower one
    only when strictly nearer), the ends past the codebook's range."""
    mu = np.clip(np.searchsorted(KVALUES, v, side="right"), 1, 15)
    lower = (v - KVALUES[mu - 1]) < (KVALUES[mu] - v)
    return np.where(v <= KVALUES[0], 0, np.where(v >= KVALUES[15], 15, mu - lower)).astype(np.uint8)


def _inv(v: np.ndarray) -> np.ndarray:
    """1 / v, and 0 where v is 0 (C's `v ? 1/v : 0`)."""
    with np.errstate(divide="ignore"):
        return np.where(v != 0, F(1) / v, F(0))


def _sums(xs: np.ndarray, w: np.ndarray, idx: np.ndarray) -> tuple[np.ndarray, np.ndarray]:
    q = KVALUES[idx]
    wq = w * q
    return seqsum(wq * xs), seqsum(wq * q)


def _group_scales(xs: np.ndarray, ntry: int) -> np.ndarray:
    """The best scale of each group (xs element-major (32, G)), 0 for groups under GROUP_MAX_EPS."""
    w = xs * xs
    ax = np.abs(xs)
    first = np.argmax(ax, axis=0)                 # the first element of largest magnitude, as C's strict >
    cols = np.arange(xs.shape[1])
    amax, mx = ax[first, cols], xs[first, cols]
    live = amax >= GROUP_MAX_EPS
    mx = np.where(live, mx, F(1))
    d = -mx / KVALUES[0]
    sumqx, sumq2 = _sums(xs, w, best_index((F(1) / d) * xs))
    d = np.where(sumq2 > 0, sumqx / np.where(sumq2 > 0, sumq2, F(1)), F(0))
    best = d * sumqx
    for itry in range(-ntry, ntry + 1):
        idv = F(itry + int(KVALUES[0])) / mx
        sumqx, sumq2 = _sums(xs, w, best_index(idv * xs))
        better = (sumq2 > 0) & (sumqx * sumqx > best * sumq2)
        d = np.where(better, sumqx / np.where(sumq2 > 0, sumq2, F(1)), d)
        best = np.where(better, d * sumqx, best)
    return np.where(live, d, F(0))


def _pack_qs(idx: np.ndarray) -> np.ndarray:
    """Codebook indices (nb, n) in element order -> qs bytes: byte j of each 32 holds elements j and j + 16."""
    nb = idx.shape[0]
    return pack_planes(idx.reshape(nb, -1, 2, 16), 4).reshape(nb, -1)


def quantize_iq4_nl(x: np.ndarray) -> np.ndarray:
    """quantize_row_iq4_nl: one scale per 32, the block's d is the best group scale itself."""
    nb = x.shape[0]
    xs = np.ascontiguousarray(x.reshape(nb, 32).T)
    scale = _group_scales(xs, _NTRY)
    idx = best_index(_inv(scale) * xs).T
    return np.concatenate([_f16_bytes(_f16(scale)), _pack_qs(idx)], axis=1)


def quantize_iq4_xs(x: np.ndarray) -> np.ndarray:
    """quantize_row_iq4_xs: 8 groups of 32 with 6-bit scales (offset 32) of one f16 d per 256."""
    nb = x.shape[0]
    xs = np.ascontiguousarray(x.reshape(-1, 32).T)            # (32, nb * 8)
    scales = _group_scales(xs, _NTRY).reshape(nb, 8)
    first = np.argmax(np.abs(scales), axis=1)                   # C's strict >: the first largest
    max_scale = scales[np.arange(nb), first]
    d = -max_scale / F(32)
    ls = np.clip(nearest_int(_inv(d)[:, None] * scales), -32, 31)
    dl = (d[:, None] * ls.astype(F)).reshape(-1)
    idx = best_index(_inv(dl) * xs).T.reshape(nb, 256)
    lsu = (ls + 32).astype(np.uint32)
    lo = (lsu & 0xF).reshape(nb, 4, 2)
    scales_l = (lo[:, :, 0] | (lo[:, :, 1] << 4)).astype(np.uint8)
    scales_h = np.bitwise_or.reduce((lsu >> 4) << (2 * np.arange(8, dtype=np.uint32)), axis=1).astype(np.uint16)
    return np.concatenate([_f16_bytes(_f16(d)), scales_h.view(np.uint8).reshape(nb, 2), scales_l,
                           _pack_qs(idx)], axis=1)


QUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {"IQ4_NL": quantize_iq4_nl, "IQ4_XS": quantize_iq4_xs}
