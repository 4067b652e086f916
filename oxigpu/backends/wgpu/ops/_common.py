"""Small helpers the op kernels share: WGSL literals, 1-D launch grids, the f16 caches' type check and the
checks' f16 cache tolerance."""
from __future__ import annotations

from dataclasses import dataclass

import numpy as np

from ....quant import kvcache as kvq
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


def cache_types(op: str, types: list[str], widths: tuple[int, int]) -> tuple[str, str]:
    """The K and V cache types a kernel reads or writes (quant/kvcache.py: f16, q8_0, q4_0), checked against
    their rows' widths (values): f16 rows an even number (two halves a word), quantized ones whole pairs of
    blocks (a multiple of 64)."""
    if len(types) != 2 or any(t not in kvq.KV_TYPES for t in types) or any(w % 2 for w in widths) \
            or any(t != "f16" and w % (2 * kvq.BLOCK) for t, w in zip(types, widths)):
        raise ValueError(f"{op}: K/V caches must be of {kvq.KV_TYPES} with even widths (quantized: multiples of "
                         f"64), got {types}, widths {widths}")
    return types[0], types[1]


def kv_defines(types: tuple[str, str], widths: tuple[int, int]) -> dict:
    """Defines of shaders/kv/cols_{true,false}.wgsl and kv/<type>.wgsl: KVQ (some cache is quantized: the
    caches are read as words through the type snippets), CTK, CTV and the words per K and V row (KROW,
    VROW)."""
    if types == ("f16", "f16"):
        return {"KVQ": False}
    return {"KVQ": True, "CTK": types[0], "CTV": types[1],
            "KROW": kvq.row_bytes(types[0], widths[0]) // 4, "VROW": kvq.row_bytes(types[1], widths[1]) // 4}


def paged_defines(paged: bool, attrs: dict, block_table: tuple[int, ...] | None, cache_rows: int,
                  bindings: tuple[int, int, int]) -> dict:
    """Defines of common/paged_{true,false}.wgsl: PAGED (the op has positions, row_seq and block_table
    inputs, at ``bindings``), the block-table width MB, the rows per block KVB (attr ``block_size``) and
    the cache pool's rows CROWS. Without them (plans built before block tables) one sequence at positions
    P.pos + t in a contiguous cache."""
    if not paged:
        return {"PAGED": False}
    return {"PAGED": True, "MB": block_table[1] if block_table and len(block_table) > 1 else 1,
            "KVB": int(attrs.get("block_size", 32)), "CROWS": max(1, cache_rows),
            "POS_B": bindings[0], "SEQ_B": bindings[1], "BT_B": bindings[2]}


def identity_table(n_seqs: int, blocks: int) -> np.ndarray:
    """A block table whose slot s owns blocks s * blocks .. (s + 1) * blocks - 1 (tests)."""
    return np.arange(n_seqs * blocks, dtype=np.int32).reshape(n_seqs, blocks)


def scattered_table(n_seqs: int, blocks: int, pool_blocks: int, seed: int) -> np.ndarray:
    """A block table of distinct pool blocks in random order, as a paged cache hands them out after some
    frees (tests: a kernel that ignores the table reads the wrong rows)."""
    perm = np.random.default_rng(seed).permutation(pool_blocks)[:n_seqs * blocks]
    return perm.astype(np.int32).reshape(n_seqs, blocks)


@dataclass
class Batch:
    """A step's rows of several sequences, as the batching contract lays them out (tests): ``runs`` of
    (slot, first position, rows) in row order, each run contiguous; then ``pad`` padding rows. The block
    table gives each slot ``blocks`` distinct blocks of a pool of ``pool`` blocks of ``block`` rows."""

    runs: list[tuple[int, int, int]]
    n_seqs: int
    blocks: int
    pool: int
    block: int = 32
    pad: int = 0
    seed: int = 0

    def __post_init__(self):
        self.positions = np.concatenate([np.arange(p, p + n) for _, p, n in self.runs] + [np.zeros(self.pad)])
        self.positions = self.positions.astype(np.int32)
        self.row_seq = np.concatenate([np.full(n, s) for s, _, n in self.runs] + [np.zeros(self.pad)]).astype(np.int32)
        self.block_table = scattered_table(self.n_seqs, self.blocks, self.pool, self.seed)
        self.n_tokens = sum(n for _, _, n in self.runs)

    @property
    def T(self) -> int:
        return self.n_tokens + self.pad

    @property
    def rows(self) -> int:
        return self.pool * self.block

    def phys(self, s: int, j) -> np.ndarray:
        j = np.asarray(j)
        return self.block_table[s, j // self.block] * self.block + j % self.block

    def inputs(self) -> list[np.ndarray]:
        return [self.positions, self.row_seq, self.block_table]
