"""Small helpers the op kernels share: WGSL literals, 1-D launch grids, the f16 caches' type check and the
checks' f16 cache tolerance."""
from __future__ import annotations

import numpy as np

from ..device import workgroups_for


def f32_lit(x: float) -> str:
    """A WGSL f32 literal that rounds to the same f32 as ``x`` (9 significant digits suffice)."""
    return f"{float(np.float32(x)):.9e}"


def grid(n_threads: int, wg: int = 256) -> tuple[int, int, int]:
    """Workgroups for ``n_threads`` threads of ``wg`` lanes; shaders linearize ``wid.y * nwg.x + wid.x``."""
    return workgroups_for(-(-int(n_threads) // wg))


def rng(seed: int) -> np.random.Generator:
    """The checks' fixed-seed generator (every run tests the same data)."""
    return np.random.default_rng(seed)


HALF_STEP = 2.0 ** -10
"""Tolerance of an f16 cache row that a kernel computes before storing it (rope_kv_store's k): one f16
rounding step relative to the row's largest value (rel_error's scale). The kernel rounds its f32 value as
numpy rounds the float64 reference, but the two may lie on either side of a halfway point."""


def check_f16_caches(op: str, types: list[str], widths: tuple[int, ...]) -> None:
    """The K/V cache inputs a kernel reads or writes: f16 (two halves per u32: shaders/common/half.wgsl),
    rows of an even number of values."""
    if types != ["f16", "f16"] or any(w % 2 for w in widths):
        raise ValueError(f"{op}: the K/V caches must be f16 with rows of even widths, got {types}, widths {widths}")
