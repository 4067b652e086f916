"""Which GEMM kernel (m > 1 rows: prefill chunks, small batches) a matmul runs, and its grid.

Kept apart from ``matmul.py`` (the GEMV side and the fused-op plumbing) so the prefill GEMM can be tuned
on its own: ``gemm_shader`` picks the shader and its defines, ``gemm_grid`` the workgroup grid.
"""
from __future__ import annotations

from typing import Any

from ..device import Device

GEMM_BM, GEMM_BN = 32, 64   # must match gemm_q.wgsl
TILED_BM, TILED_BN = 64, 128  # must match gemm_tiled.wgsl
TILED_MIN_ROWS = 33


def gemm_shader(dev: Device, m: int, qtype: str) -> tuple[str, dict[str, Any], tuple[int, int]]:
    """The GEMM for m > 1 rows: (shader, extra defines, (BM, BN) tile).

    Prefill chunks (m >= TILED_MIN_ROWS) take the 64x128 register-tiled kernel; fewer rows keep the 32x64
    kernel, which wastes less of its tile. Weight tiles are f16 only for F16 weights (exact; half the
    workgroup memory); dequantized values stay f32: rounding them to f16 (~2e-4 relative) flipped seeded
    samples against the numpy backend (tests/test_reliability_wgpu.py).
    """
    if m < TILED_MIN_ROWS:
        return "gemm_q.wgsl", {}, (GEMM_BM, GEMM_BN)
    f16 = qtype == "F16" and dev.has_f16
    return ("gemm_tiled.wgsl", {"WT": "f16" if f16 else "f32", "WT_ENABLE": "enable f16;" if f16 else ""},
            (TILED_BM, TILED_BN))


def gemm_grid(tile: tuple[int, int], m: int, rows: int) -> tuple[int, int, int]:
    """Workgroups for ``rows`` weight rows (output columns) and ``m`` x rows with (BM, BN) tiles."""
    return (-(-rows // tile[1]), -(-m // tile[0]), 1)
