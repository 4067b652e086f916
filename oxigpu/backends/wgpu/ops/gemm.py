"""The GEMM (m > 1 rows: prefill chunks, small batches) of a matmul: which kernel, its grid, its dispatches.

Kept apart from ``matmul.py`` (the GEMV side and the fused-op plumbing) so the prefill GEMM can be tuned
on its own: ``tile_config`` picks the register tile and split-k, ``gemm_shader`` the shader and its
defines, ``gemm_grid`` the workgroup grid, and :class:`GemmKernel` (which ``matmul.Gemm`` holds) builds
the pipelines and encodes the dispatches of one weight row range.
"""
from __future__ import annotations

import threading
import weakref
from dataclasses import dataclass, replace
from typing import Any, Mapping

from ....errors import DeviceError
from ..device import PARAMS_BINDING, Binding, Device, Dispatch

GEMM_BM, GEMM_BN = 32, 64   # must match gemm_q.wgsl
TILED_MIN_ROWS = 33


@dataclass(frozen=True)
class TileConfig:
    """gemm_tiled.wgsl's register tile: TM x TN outputs per thread (4 or 8 each) of a 16 TM x 16 TN
    workgroup tile, BK (16 or 32) inner elements per step; ``splits`` > 1: split-k into that many partial
    GEMMs and a reduction pass (``gemm_reduce.wgsl``); ``loaders``: threads beside the 256 FMA threads
    that alone load and dequantize the tiles (0: the FMA threads do)."""

    tm: int = 8
    tn: int = 8
    bk: int = 16
    splits: int = 1
    loaders: int = 256

    @property
    def tile(self) -> tuple[int, int]:
        return 16 * self.tm, 16 * self.tn

    def smem_bytes(self, wt_bytes: int = 4) -> int:
        """Workgroup memory: two buffers of BK x BM f32 (x) and BK x BN weights."""
        return 2 * self.bk * (16 * self.tm * 4 + 16 * self.tn * wt_bytes)

    def check(self) -> None:
        if self.tm not in (4, 8) or self.tn not in (4, 8) or self.bk not in (16, 32) or not 1 <= self.splits <= 64 \
                or self.loaders not in (0, 128, 256):
            raise DeviceError(f"matmul: unsupported GEMM tile {self}")
        if 16 * self.tn * self.bk // 8 > 256 or 16 * self.tm * self.bk // 4 > 512:
            raise DeviceError(f"matmul: GEMM tile {self} needs more than 256 weight chunks or 512 x vec4s a step")


SLOTS = 132
"""Workgroups of the default tile that run at once: the H100's 132 SMs hold one each (256 FMA + 256 loader
threads take its whole register file). Only the split-k choice uses it; other GPUs get a suboptimal split."""

FMA_RATE = 7.6e10
"""FMAs per second of one 8x8 workgroup (~20 TFLOP/s over 132 of them, H100); ``tile_config``'s cost model."""

RED_BYTES_S, RED_FIXED_S = 2e12, 4e-6
"""The reduction pass's cost model: bytes per second over its partial sums and output, plus a dispatch."""


def tile_config(m: int, n: int, k: int) -> TileConfig:
    """The register tile for an m x n output over k inner elements (n: the weight's rows).

    8 x 8 per thread (128 x 128 tiles, 256 loader threads; 64-row tiles for m <= 64), and the split-k
    count (1..4) or 8 x 4 tiles where a cost model says they finish first by 15 % (for what it leaves out):
    waves of ``SLOTS`` workgroups, each taking its tile's FMAs at ``FMA_RATE`` (8 x 4: 0.9 of it), plus the
    reduction over the partial sums when split. Llama-3.1-8B's GEMMs stay whole but q/k/v (2 splits);
    narrow outputs (Qwen2.5-0.5B's 896 columns: 28 tiles) split k. H100 results: BENCHMARKS.md, Prefill.
    """
    tm = 4 if m <= 64 else 8            # short chunks: 64-row tiles
    best = None
    for tn, rate in ((8, 1.0), (4, 0.9)):
        for splits in range(1, 5):
            if k < 256 * splits:
                break
            wgs = -(-m // (16 * tm)) * -(-n // (16 * tn)) * splits
            t = -(-wgs // SLOTS) * 16 * tm * 16 * tn * (k / splits) / (FMA_RATE * rate)
            if splits > 1:
                t += (splits + 2) * 4 * m * n / RED_BYTES_S + RED_FIXED_S
            if best is None or t < best[0] * 0.85:    # a split or narrower tile must win by 15 %
                best = (t, TileConfig(tm=tm, tn=tn, splits=splits))
    return best[1] if best else TileConfig(tm=tm)


def gemm_shader(dev: Device, m: int, qtype: str, n: int = 0, override: Mapping[str, Any] | None = None,
                k: int = 0) -> tuple[str, dict[str, Any], TileConfig | None]:
    """The GEMM for m > 1 rows: (shader, extra defines, tile; None for gemm_q.wgsl's fixed 32x64).

    Prefill chunks (m >= TILED_MIN_ROWS) take the register-tiled kernel (``tile_config``; ``override``:
    TileConfig fields, for tests and benchmarks); fewer rows keep the 32x64 kernel, which wastes less of
    its tile. Weight tiles are f32: dequantized values rounded to f16 (~2e-4 relative) flipped seeded
    samples against the numpy backend (tests/test_reliability_wgpu.py), and F16 weights, which f16 tiles
    hold exactly, ran faster in f32 tiles too (H100, 4096 x 4096: 21.2 against 19.3 TFLOP/s); override
    ``f16``: True puts F16 weights in f16 tiles where the adapter has shader-f16.
    """
    override = dict(override or {})
    f16_tiles = override.pop("f16", False)
    if m < TILED_MIN_ROWS and not override:
        return "gemm_q.wgsl", {}, None
    cfg = TileConfig(**{**tile_config(m, n, k).__dict__, **override})
    cfg.check()
    if cfg.splits > 1 and 4 * cfg.splits * m * n > dev.max_storage_binding:
        cfg = replace(cfg, splits=1)        # the partial sums would not fit one binding
    if 256 + cfg.loaders > dev.limits.get("max-compute-invocations-per-workgroup", 256):
        cfg = replace(cfg, loaders=0)       # the FMA threads load too
    f16 = f16_tiles and qtype == "F16" and dev.has_f16
    limit = dev.limits.get("max-compute-workgroup-storage-size", 16384)
    if cfg.smem_bytes(2 if f16 else 4) > limit:
        raise DeviceError(f"matmul: GEMM tile {cfg} needs {cfg.smem_bytes(2 if f16 else 4)} B of workgroup "
                          f"memory; the adapter allows {limit}")
    return ("gemm_tiled.wgsl", {"WT": "f16" if f16 else "f32", "WT_ENABLE": "enable f16;" if f16 else "",
                                "TM": cfg.tm, "TN": cfg.tn, "BK": cfg.bk, "SPLITS": cfg.splits,
                                "NL": cfg.loaders}, cfg)


def gemm_grid(tile: tuple[int, int], m: int, rows: int, splits: int = 1) -> tuple[int, int, int]:
    """Workgroups for ``rows`` weight rows (output columns) and ``m`` x rows with (BM, BN) tiles."""
    return (-(-rows // tile[1]), -(-m // tile[0]), splits)


_SCRATCH: "weakref.WeakKeyDictionary[Device, list[Any]]" = weakref.WeakKeyDictionary()
_SCRATCH_LOCK = threading.Lock()


def _scratch(dev: Device, nbytes: int) -> Any:
    """A device-wide buffer of at least ``nbytes`` for split-k partial sums. One is shared by every GEMM
    (dispatches run in order, and wgpu orders each dispatch's writes before the next one's reads); a
    larger need replaces it for later GEMMs while earlier bind groups keep theirs (kept alive here).
    Locked: kernels are encoded on several threads at load (``WgpuBackend.compile_threads``)."""
    with _SCRATCH_LOCK:
        bufs = _SCRATCH.setdefault(dev, [])
        if not bufs or bufs[-1].size < nbytes:
            bufs.append(dev.create_buffer(max(nbytes, 2 * bufs[-1].size if bufs else 0),
                                          label="gemm split-k scratch"))
        return bufs[-1]


class GemmKernel:
    """The m > 1 GEMM of one matmul (``matmul.Gemm`` with its ``defines``): pipelines and dispatches.

    ``override``: TileConfig fields (plus ``f16``: True puts F16 weights in f16 tiles) replacing the
    choice, which also forces the tiled kernel below TILED_MIN_ROWS (tests, benchmarks).
    """

    def __init__(self, dev: Device, m: int, k: int, n: int, qtype: str, defines: Mapping[str, Any],
                 override: Mapping[str, Any] | None = None):
        self.dev, self.m = dev, m
        shader, extra, self.cfg = gemm_shader(dev, m, qtype, n, override, k=k)
        self.tile = self.cfg.tile if self.cfg else (GEMM_BM, GEMM_BN)
        self.splits = self.cfg.splits if self.cfg else 1
        self.pipe = dev.pipeline(shader, defines={**defines, **extra})
        self.reduce = (dev.pipeline("gemm_reduce.wgsl", defines={**defines, "SPLITS": self.splits})
                       if self.splits > 1 else None)

    def encode(self, binds: Mapping[int, Binding], rows: int) -> list[Dispatch]:
        """Dispatches for one weight row range: ``binds`` as matmul_io.wgsl declares them (1 dims, 2 x,
        3 W, 4 bias, 5 y, 7 res), ``rows`` the range's weight rows."""
        grid = gemm_grid(self.tile, self.m, rows, self.splits)
        binds = {PARAMS_BINDING: self.dev.params_buffer, **binds}   # n_tokens: padding row tiles exit
        if self.splits == 1:
            return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid)]
        nbytes = 4 * self.splits * self.m * rows
        part = (_scratch(self.dev, nbytes), 0, nbytes)
        gemm = Dispatch(self.pipe, self.dev.bind_group(self.pipe, {**binds, 5: part}), grid)
        red = {i: binds[i] for i in (PARAMS_BINDING, 1, 4, 5, 7)} | {6: part}
        return [gemm, Dispatch(self.reduce, self.dev.bind_group(self.reduce, red), (-(-rows // 256), self.m, 1))]
