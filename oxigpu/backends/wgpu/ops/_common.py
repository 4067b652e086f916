"""Small helpers the op kernels share: WGSL literals and 1-D launch grids."""
from __future__ import annotations

import numpy as np

from ..device import workgroups_for


def f32_lit(x: float) -> str:
    """A WGSL f32 literal that rounds to the same f32 as ``x`` (9 significant digits suffice)."""
    return f"{float(np.float32(x)):.9e}"


def f32_list(xs: np.ndarray) -> str:
    """Comma-separated f32 literals (for const arrays baked into a shader)."""
    return ", ".join(f32_lit(x) for x in np.asarray(xs).reshape(-1))


def grid(n_threads: int, wg: int = 256) -> tuple[int, int, int]:
    """Workgroups for ``n_threads`` threads of ``wg`` lanes; shaders linearize ``wid.y * nwg.x + wid.x``."""
    return workgroups_for(-(-int(n_threads) // wg))


def rng(seed: int) -> np.random.Generator:
    """The checks' fixed-seed generator (every run tests the same data)."""
    return np.random.default_rng(seed)
