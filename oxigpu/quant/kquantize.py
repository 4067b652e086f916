"""ggml's reference K-quant quantizers (`quantize_row_q{2..6}_K_ref`), vectorized over blocks.

ggml-quants.c works one group (16 or 32 weights) at a time in float32 with sequential sums. Here
a group of n weights over G groups is an element-major (n, G) array, so `x[i]` is one contiguous
vector across all groups: every scalar statement of the C code becomes one numpy operation on G
values, in the same float32 order. Sums are explicit loops over i (np.sum adds pairwise, which
rounds differently), `nearest_int` copies ggml's bit trick, and where C skips a group (`continue`,
early returns) we compute everything and select with masks. The result is ggml's bytes, not an
approximation of them. Inputs must be finite.
"""
from __future__ import annotations

from collections.abc import Callable

import numpy as np

from ._bits import pack_planes

F = np.float32
GROUP_MAX_EPS = F(1e-15)
QK_K = 256


def nearest_int(v: np.ndarray) -> np.ndarray:
    """ggml's nearest_int: add 1.5 * 2**23 in float32 and read the mantissa bits (int32)."""
    return ((v + F(12582912.0)).view(np.int32) & 0x7FFFFF) - 0x400000


def seqsum(terms: np.ndarray, from_zero: bool = True) -> np.ndarray:
    """Sum over axis 0 left to right in float32, starting from 0 (or from the first term)."""
    acc = terms[0] + F(0) if from_zero else terms[0].copy()
    for t in terms[1:]:
        acc += t
    return acc


def _int8(v: np.ndarray) -> np.ndarray:
    """C's conversion of an int to int8_t (wraps)."""
    return ((v + 128) & 0xFF) - 128


def _f16(v: np.ndarray) -> np.ndarray:
    """GGML_FP32_TO_FP16 (round to nearest even), kept as float16."""
    return v.astype(np.float16)


def _f16_bytes(v: np.ndarray) -> np.ndarray:
    return np.ascontiguousarray(v, dtype=np.float16).view(np.uint8).reshape(-1, 2)


def _groups(x: np.ndarray, n: int) -> np.ndarray:
    """(nb, 256) -> element-major (n, nb * 256 // n): column g is group g of the row-major blocks."""
    return np.ascontiguousarray(x.reshape(-1, n).T)


def _ungroup(lv: np.ndarray, nb: int) -> np.ndarray:
    """Inverse of `_groups`, as uint8 quants (nb, 256)."""
    return lv.T.reshape(nb, QK_K).astype(np.uint8)


def _abs_max(v: np.ndarray, axis: int) -> np.ndarray:
    """The signed value of largest magnitude, first one on ties (C's `if (ax > amax)` scan)."""
    idx = np.expand_dims(np.abs(v).argmax(axis=axis), axis)
    return np.take_along_axis(v, idx, axis=axis).squeeze(axis)


def _requant(xs: np.ndarray, d: np.ndarray, dm: np.ndarray | None, lo: int, hi: int, offset: int,
             lv: np.ndarray) -> np.ndarray:
    """ggml's final pass: l = clip(nearest_int((x + dm) / d)) + offset; groups with d == 0 keep lv."""
    num = xs if dm is None else xs + dm
    q = np.clip(nearest_int(num / d), lo, hi) + offset
    return np.where(d != 0, q, lv)


def make_qkx2_quants(x: np.ndarray, w: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int,
                     use_mad: bool) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """Scale and min for groups x (n, G) with weights w: a search over nstep + 1 candidate scales,
    each refined by weighted least squares. Returns (scale, -min, L) with L float32 in 0..nmax."""
    def err(diff: np.ndarray) -> np.ndarray:
        return np.abs(diff) if use_mad else diff * diff

    mn = np.minimum(x.min(axis=0), F(0))
    mx = x.max(axis=0)
    sum_w = seqsum(w, from_zero=False)
    sum_x = seqsum(w * x, from_zero=False)
    flat = mx == mn

    iscale = F(nmax) / (mx - mn)
    scale = F(1) / iscale
    lv = np.clip(nearest_int(iscale * (x - mn)), 0, nmax).astype(F)
    best = seqsum(w * err(scale * lv + mn - x))
    for step in range(nstep + 1):
        iscale = (F(rmin) + F(rdelta) * F(step) + F(nmax)) / (mx - mn)
        laux = np.clip(nearest_int(iscale * (x - mn)), 0, nmax).astype(F)
        wl = w * laux
        sum_l, sum_l2, sum_xl = seqsum(wl), seqsum(wl * laux), seqsum(wl * x)
        det = sum_w * sum_l2 - sum_l * sum_l
        this_scale = (sum_w * sum_xl - sum_x * sum_l) / det
        this_min = (sum_l2 * sum_x - sum_l * sum_xl) / det
        clamp = this_min > 0
        this_scale = np.where(clamp, sum_xl / sum_l2, this_scale)
        this_min = np.where(clamp, F(0), this_min)
        cur = seqsum(w * err(this_scale * laux + this_min - x))
        better = (det > 0) & (cur < best) & ~flat
        lv = np.where(better, laux, lv)
        best = np.where(better, cur, best)
        scale = np.where(better, this_scale, scale)
        mn = np.where(better, this_min, mn)
    return np.where(flat, F(0), scale), -mn, np.where(flat, F(0), lv)


def make_q3_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric scale for groups x (n, G) by coordinate descent on x**2-weighted error
    (ggml's make_q3_quants with do_rmse). Returns (scale, L) with L float32 in 0..2*nmax-1."""
    n = x.shape[0]
    mx = _abs_max(x, 0)
    zero = np.abs(mx) < GROUP_MAX_EPS
    lv = np.clip(nearest_int((F(-nmax) / mx) * x), -nmax, nmax - 1).astype(F)
    w = x * x
    wx = w * x
    sumlx, suml2 = seqsum(wx * lv), seqsum(w * lv * lv)
    for _ in range(5):
        changed = np.zeros(x.shape[1], bool)
        for i in range(n):
            li = lv[i]
            slx = sumlx - wx[i] * li
            sl2 = suml2 - w[i] * li * li
            new = np.clip(nearest_int(x[i] * sl2 / slx), -nmax, nmax - 1).astype(F)
            slx_new = slx + wx[i] * new
            sl2_new = sl2 + w[i] * new * new
            ok = ((slx > 0) & (new != li) & (sl2_new > 0)
                  & (slx_new * slx_new * suml2 > sumlx * sumlx * sl2_new))
            lv[i] = np.where(ok, new, li)
            sumlx = np.where(ok, slx_new, sumlx)
            suml2 = np.where(ok, sl2_new, suml2)
            changed |= ok
        if not changed.any():
            break
    scale = np.where(suml2 > 0, sumlx / suml2, F(0))
    return np.where(zero, F(0), scale), np.where(zero, F(0), lv + F(nmax))


def make_qx_quants(x: np.ndarray, nmax: int) -> tuple[np.ndarray, np.ndarray]:
    """Symmetric scale for groups x (n, G): try 19 scales around nmax/amax and keep the best
    x**2-weighted least-squares fit (ggml's make_qx_quants, rmse_type 1, no importance weights).
    Returns (scale, L) with L float32 in 0..2*nmax-1."""
    mx = _abs_max(x, 0)
    zero = np.abs(mx) < GROUP_MAX_EPS
    w = x * x
    wx = w * x

    def fit(iscale: np.ndarray) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
        lv = np.clip(nearest_int(iscale * x), -nmax, nmax - 1).astype(F)
        return lv, seqsum(wx * lv), seqsum(w * lv * lv)

    lv, sumlx, suml2 = fit(F(-nmax) / mx)
    scale = np.where(suml2 != 0, sumlx / suml2, F(0))
    best = scale * sumlx
    for step in (*range(-9, 0), *range(1, 10)):
        laux, slx, sl2 = fit(-(F(nmax) + F(0.1) * F(step)) / mx)
        better = (sl2 > 0) & (slx * slx > best * sl2)
        lv = np.where(better, laux, lv)
        scale = np.where(better, slx / sl2, scale)
        best = np.where(better, scale * slx, best)
    return np.where(zero, F(0), scale), np.where(zero, F(0), lv + F(nmax))


def quantize_q2_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q2_K_ref: 16 groups of 16, 2-bit quants, 4-bit scales and mins."""
    nb = x.shape[0]
    xs = _groups(x, 16)
    scales, mins, lv = make_qkx2_quants(xs, np.abs(xs), 3, -0.5, 0.1, 15, True)
    scales, mins = scales.reshape(nb, 16), mins.reshape(nb, 16)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    has_s, has_m = max_scale > 0, max_min > 0
    ls = np.where(has_s[:, None], nearest_int((F(15) / max_scale)[:, None] * scales), 0)
    lm = np.where(has_m[:, None], nearest_int((F(15) / max_min)[:, None] * mins), 0)
    sc = (ls | (lm << 4)) & 0xFF
    d = np.where(has_s, _f16(max_scale / F(15)), np.float16(0))
    dmin = np.where(has_m, _f16(max_min / F(15)), np.float16(0))
    dq = d.astype(F)[:, None] * (sc & 0xF).astype(F)
    mq = dmin.astype(F)[:, None] * (sc >> 4).astype(F)
    q = _ungroup(_requant(xs, dq.reshape(-1), mq.reshape(-1), 0, 3, 0, lv), nb)
    qs = pack_planes(q.reshape(nb, 2, 4, 32), 2).reshape(nb, 64)
    return np.concatenate([sc.astype(np.uint8), qs, _f16_bytes(d), _f16_bytes(dmin)], axis=1)


def quantize_q3_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q3_K_ref: 16 groups of 16, 3-bit quants (2 low bits + a high-bit mask),
    6-bit signed scales."""
    nb = x.shape[0]
    xs = _groups(x, 16)
    scales, lv = make_q3_quants(xs, 4)
    scales = scales.reshape(nb, 16)
    max_scale = _abs_max(scales, 1)
    has = max_scale != 0
    iscale = F(-32) / max_scale
    ls = np.clip(_int8(nearest_int(iscale[:, None] * scales)), -32, 31) + 32
    ls = np.where(has[:, None], ls, 0)
    d = np.where(has, _f16(F(1) / iscale), np.float16(0))
    dq = d.astype(F)[:, None] * (ls - 32).astype(F)
    q = _ungroup(_requant(xs, dq.reshape(-1), None, -4, 3, 4, lv), nb)
    hmask = pack_planes((q >> 2).reshape(nb, 8, 32), 1)
    qs = pack_planes((q & 3).reshape(nb, 2, 4, 32), 2).reshape(nb, 64)
    packed = np.concatenate([pack_planes((ls & 0xF).reshape(nb, 2, 8), 4),
                             pack_planes((ls >> 4).reshape(nb, 4, 4), 2)], axis=1)
    return np.concatenate([hmask, qs, packed, _f16_bytes(d)], axis=1)


def _q45_k(x: np.ndarray, nmax: int, rmin: float, rdelta: float, nstep: int
           ) -> tuple[np.ndarray, np.ndarray]:
    """Shared body of Q4_K/Q5_K: 8 groups of 32 with 6-bit scales and mins.
    Returns (the 16 header bytes d | dmin | scales[12], quants (nb, 256) uint8)."""
    nb = x.shape[0]
    xs = _groups(x, 32)
    av_x = np.sqrt(seqsum(xs * xs) / F(32))
    scales, mins, lv = make_qkx2_quants(xs, av_x + np.abs(xs), nmax, rmin, rdelta, nstep, False)
    scales, mins = scales.reshape(nb, 8), mins.reshape(nb, 8)
    max_scale = np.maximum(scales.max(axis=1), F(0))
    max_min = np.maximum(mins.max(axis=1), F(0))
    inv_scale = np.where(max_scale > 0, F(63) / max_scale, F(0))
    inv_min = np.where(max_min > 0, F(63) / max_min, F(0))
    ls = np.minimum(nearest_int(inv_scale[:, None] * scales) & 0xFF, 63)
    lm = np.minimum(nearest_int(inv_min[:, None] * mins) & 0xFF, 63)
    d, dmin = _f16(max_scale / F(63)), _f16(max_min / F(63))
    dq = d.astype(F)[:, None] * ls.astype(F)
    mq = dmin.astype(F)[:, None] * lm.astype(F)
    q = _ungroup(_requant(xs, dq.reshape(-1), mq.reshape(-1), 0, nmax, 0, lv), nb)
    packed = np.concatenate([ls[:, :4] | ((ls[:, 4:] >> 4) << 6),
                             lm[:, :4] | ((lm[:, 4:] >> 4) << 6),
                             (ls[:, 4:] & 0xF) | ((lm[:, 4:] & 0xF) << 4)], axis=1).astype(np.uint8)
    return np.concatenate([_f16_bytes(d), _f16_bytes(dmin), packed], axis=1), q


def quantize_q4_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q4_K_ref: 4-bit quants."""
    head, q = _q45_k(x, 15, -1.0, 0.1, 20)
    qs = pack_planes(q.reshape(-1, 4, 2, 32), 4).reshape(-1, 128)
    return np.concatenate([head, qs], axis=1)


def quantize_q5_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q5_K_ref: 4 low bits in qs, the fifth bit in qh."""
    head, q = _q45_k(x, 31, -0.5, 0.1, 15)
    qh = pack_planes((q >> 4).reshape(-1, 8, 32), 1)
    qs = pack_planes((q & 0xF).reshape(-1, 4, 2, 32), 4).reshape(-1, 128)
    return np.concatenate([head, qh, qs], axis=1)


def quantize_q6_k(x: np.ndarray) -> np.ndarray:
    """quantize_row_q6_K_ref: 16 groups of 16, 6-bit quants, 8-bit signed scales."""
    nb = x.shape[0]
    xs = _groups(x, 16)
    scales, lv = make_qx_quants(xs, 32)
    scales = scales.reshape(nb, 16)
    max_scale = _abs_max(scales, 1)
    zero = np.abs(max_scale) < GROUP_MAX_EPS
    iscale = F(-128) / max_scale
    d = _f16(F(1) / iscale)
    sc = _int8(np.minimum(nearest_int(iscale[:, None] * scales), 127))
    dq = d.astype(F)[:, None] * sc.astype(F)
    q = _ungroup(_requant(xs, dq.reshape(-1), None, -32, 31, 32, lv), nb)
    lo = (q & 0xF).reshape(nb, 2, 2, 2, 32).swapaxes(2, 3)
    ql = pack_planes(lo, 4).reshape(nb, 128)
    qh = pack_planes((q >> 4).reshape(nb, 2, 4, 32), 2).reshape(nb, 64)
    out = np.concatenate([ql, qh, sc.astype(np.uint8), _f16_bytes(d)], axis=1)
    out[zero] = 0
    return out


QUANTIZE: dict[str, Callable[[np.ndarray], np.ndarray]] = {
    "Q2_K": quantize_q2_k, "Q3_K": quantize_q3_k, "Q4_K": quantize_q4_k,
    "Q5_K": quantize_q5_k, "Q6_K": quantize_q6_k,
}
