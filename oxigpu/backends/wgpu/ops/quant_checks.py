"""Kernel checks of every weight type on every matmul path this adapter has (``oxigpu kernels --filter quant``).

Per type: the GEMV on random blocks of the largest f16 scales, the short GEMM on the smallest normal ones
(both float dots, as the defaults take at these sizes); the GEMV with integer dots (its piece's twin); the
tiled GEMM in f32, with integer dots (the type's gemm_q8 loader, against its twin) and, where the adapter
has matrix units, on them (against theirs). Shapes leave partial tiles and odd row counts; outputs are
NaN-poisoned by ``prepare``; references are float64. The ``matmul`` checks (ops/matmul.py) run the same
types on N(0, 1) weights through the default kernels.
"""
from __future__ import annotations

from collections.abc import Iterable
from dataclasses import replace

import numpy as np

from ....quant import dequantize, get_type
from ....quant.samples import random_blocks
from ..device import Device
from ..kernel import Case, check
from .gemm import HALF_TYPES, MMA_TYPES, Q8_TYPES
from .matmul import GEMV_PIECES, Q8X_PIECES, TYPES, matmul_case, matmul_tol, mma_gemm_case, q8_gemm_case, q8x_case


def scales_case(qtype: str, m: int, k: int, n: int, magnitude: str, seed: int) -> Case:
    """x[m, k] @ W.T + bias on ``random_blocks`` of ``magnitude`` (every block's f16 scales in that binade
    range, so no row is drowned by another's; the bias of the weights' size): float64 reference, the f32
    tolerance."""
    rng = np.random.default_rng(seed)
    qt = get_type(qtype)
    raw = random_blocks(qt, n, k, rng, magnitude)
    w = dequantize(raw, qt).astype(np.float64)
    x = rng.standard_normal((m, k)).astype(np.float32)
    bias = (rng.standard_normal(n) * np.abs(w).max()).astype(np.float32)

    def reference() -> list[np.ndarray]:
        return [x.astype(np.float64) @ w.T + bias]
    return Case("matmul", f"{qt.name} {magnitude} scales {m}x{k} @ {n}x{k} +bias", [x, raw, bias],
                ["f32", qt.name, "f32"], reference, tol=matmul_tol(m, k))


def _k(t: str) -> int:
    return {1: 200, 32: 224}.get(get_type(t).block_size, 768)


def gemv_piece(qtype: str) -> str | None:
    """The piece the GEMV takes for ``qtype`` with integer dots, or None where it has none."""
    piece = GEMV_PIECES.get(qtype) or ("q32" if qtype in Q8_TYPES else None)
    return piece if piece in Q8X_PIECES else None


@check("quant")
def quant_checks() -> Iterable[Case]:
    """Every type of ops/matmul.py TYPES on every path of this adapter (see the module docstring)."""
    mma = Device.get().has_mma      # the matrix-unit cases only where the adapter has them
    for i, t in enumerate(TYPES):
        k = _k(t)
        yield scales_case(t, 1, k + 2 * max(get_type(t).block_size, 8), 67, "huge", seed=400 + i)
        yield scales_case(t, 5, k, 37, "tiny", seed=430 + i)
        piece = gemv_piece(t)
        if piece:
            c = matmul_case(t, 1, k, 37, bias=True, seed=460 + i)
            yield replace(q8x_case(c, [piece]), attrs={"gemv": {"q8x": True, "piece": piece, "ppb32": 2}})
        c = matmul_case(t, 40, k, 67, bias=True, seed=490 + i)
        yield replace(c, name=c.name + " tiled f32", attrs={"gemm": {"q8": False, "mma": False}})
        if t in Q8_TYPES:
            yield replace(q8_gemm_case(c), attrs={"gemm": {"q8": True, "mma": False}})
        if mma and t in MMA_TYPES:
            c = matmul_case(t, 70, 4 * _k(t) if get_type(t).block_size == 1 else 2 * k, 131, bias=True, seed=520 + i)
            yield replace(mma_gemm_case(c), attrs={"gemm": {"mma": True, "half": False}})
            if t in HALF_TYPES:
                yield replace(mma_gemm_case(c, [t]), attrs={"gemm": {"mma": True, "half": True}})

