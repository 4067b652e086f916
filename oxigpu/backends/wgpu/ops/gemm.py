"""The GEMM (m > 1 rows: prefill chunks, small batches) of a matmul: which kernel, its grid, its dispatches.

Kept apart from ``matmul.py`` (the GEMV side and the fused-op plumbing): ``tile_config`` and ``mma_tile`` pick the
register tile and split-k by the cost models whose constants are in ``tuning.py`` (``GemmTuning``), ``gemm_shader``
the shader and its defines, ``gemm_grid`` the workgroup grid, and :class:`GemmKernel` (which ``matmul.Gemm`` holds)
builds the pipelines and encodes the dispatches of one weight row range. Three tiled kernels: f32 FMAs on
dequantized weights (``gemm_tiled.wgsl``), integer dots on int8 x (``gemm_q8.wgsl``, ``Q8_TYPES``, where
``Device.int8_dots`` allows; ``q8_round`` is its x in numpy), and f16 products on the matrix units
(``gemm_mma.wgsl``, ``MMA_TYPES``, where ``Device.has_mma``), whose x pass (``gemm_xh.wgsl``) also runs a norm
prologue and whose epilogue also runs ``matmul_glu``'s activation (``glu_gemm``).
"""
from __future__ import annotations

import threading
import weakref
from collections.abc import Callable, Mapping
from dataclasses import dataclass, replace
from typing import Any

import numpy as np

from ....errors import DeviceError
from ....quant import get_type
from ....quant._bits import bit_planes, f16_field
from ....quant.kquants import k4_scales
from ..device import PARAMS_BINDING, Binding, Device, Dispatch
from ..tuning import GPU, Tuning, device_class, tuning
from ._common import f32_lit
from .quant_grid import grid_binds

GEMM_BM, GEMM_BN = 32, 64   # must match gemm_q.wgsl
TILED_MIN_ROWS = tuning(GPU).gemm.tiled_min_rows
"""Rows from which a chunk takes a register-tiled GEMM (tuning.py ``GemmTuning``; the same in every class)."""


Q8_TYPES = ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q5_0", "Q4_1", "Q5_1", "Q3_K", "Q5_K", "IQ4_NL", "IQ4_XS",
            "IQ2_XXS", "IQ2_XS", "IQ2_S", "IQ3_XXS", "IQ3_S", "IQ1_S", "IQ1_M", "TQ1_0", "TQ2_0")
"""Weight types with an integer-dot GEMM snippet (shaders/gemm_q8/<type>.wgsl): every quantized type but
Q2_K (a min per 16 elements, where the kernel has a min per 32)."""
Q8_FK16 = ("Q6_K", "Q3_K", "IQ2_XS", "IQ2_S", "IQ1_M")
"""Q8_TYPES whose snippet has a scale per 16 elements (FK 16); the rest one per 32."""
Q8_MINS = ("Q4_K", "Q5_K", "Q4_1", "Q5_1")
"""Q8_TYPES whose snippet has a min per 32 elements (HM 1)."""

MMA_TYPES = (*Q8_TYPES, "F16", "F32", "BF16", "Q2_K")
"""Weight types the matrix-unit GEMM (``gemm_mma.wgsl``) stages: through their gemm_q8 snippet, F16 as it
is, the rest through their dq8 snippet (``gemm_mma/dq8.wgsl``): every type (F32 only on request)."""


HALF_TYPES = ("Q4_K", "Q6_K")
"""Types with a matrix-unit loader dequantizing in f16 arithmetic (``gemm_mma/<type>h.wgsl``)."""
W16_BINDING = 12
"""The weights bound a second time as 16-byte words (the f16-arithmetic loaders, gemm_mma/<type>h.wgsl, and
gemm_mma/q32r16.wgsl); Q4_K's and q32r16's read W only so, Q6_K's its scales through W too."""
MMV_TYPES = ("Q4_K", "Q6_K")
"""Types with a loader in the decode-batch matrix-unit kernel (``gemm_mmv/<type>.wgsl``; Q4_K reads W as
16-byte words, Q6_K's 210-byte blocks as words)."""
MMV_SUBGROUPS = 8
"""Its subgroups a workgroup, 16 weight rows each: x staged once serves 128 rows (4 subgroups were slower:
docs/perf-log.md, eighteenth session)."""
RAW_TYPES = ("Q8_0", "Q5_0", "Q4_0")
"""Types whose matrix-unit loader reads a unit's words and decodes them a step later (gemm_mma/q32r.wgsl;
TileConfig.raw16: as 16-byte words, gemm_mma/q32r16.wgsl)."""


def half_dequant(w: np.ndarray, qtype: str) -> np.ndarray:
    """float64 of the weights as ``gemm_mma/<type>h.wgsl`` stages them in f16: the sub-block factors
    rounded to f16 (Q4_K: d sc and 8 d sc - dmin m, the latter from f32; Q6_K: d sc per 16), then each
    weight rounded once from the exact (q - 8) d sc + (8 d sc - dmin m), or (q - 32) d sc (the shader's
    f16 fused multiply-add; where a driver splits it, a weight may land one f16 step away, well inside
    the twin's tolerance). ``w``: rows of blocks (uint8)."""
    qt = get_type(qtype)
    b = np.ascontiguousarray(w).view(np.uint8).reshape(-1, qt.type_size)
    n = b.shape[0]
    f16 = lambda a: np.asarray(a, np.float32).astype(np.float16).astype(np.float64)
    if qtype == "Q4_K":
        sc, mn = k4_scales(b[:, 4:16])
        d32 = f16_field(b, 0) * sc.astype(np.float32)
        d, c = f16(d32), f16(np.float32(8) * d32 - f16_field(b, 2) * mn.astype(np.float32))
        q = bit_planes(b[:, 16:].reshape(n, 4, 32), 4).reshape(n, 8, 32).astype(np.float64) - 8
        out = q * d[:, :, None] + c[:, :, None]
    elif qtype == "Q6_K":
        q = bit_planes(b[:, :128].reshape(n, 2, 64), 4).reshape(n, 2, 4, 32)
        q = (q | (bit_planes(b[:, 128:192].reshape(n, 2, 32), 2) << np.uint8(4))).astype(np.float64) - 32
        s = f16(f16_field(b, 208) * b[:, 192:208].view(np.int8).astype(np.float32))
        out = q.reshape(n, 16, 16) * s[:, :, None]
    else:
        raise DeviceError(f"matmul: no half-precision matrix-unit loader for {qtype}")
    return out.astype(np.float16).astype(np.float64).reshape(*w.shape[:-1], -1)


def _reduce_s(t: Tuning, m: int, n: int, splits: int) -> float:
    """Seconds of the split-k reduction pass over ``splits`` partial sums of an m x n output."""
    return (splits + 2) * 4 * m * n / t.gemm.red_bytes_s + t.gemm.red_fixed_s


def mma_tile(m: int, n: int, k: int, device: str = GPU) -> tuple[dict[str, int], float]:
    """The matrix-unit GEMM's default tile and split-k for an m x n output over k, and the TFLOP/s it is
    expected to reach. Each of the class's ``GemmTuning.mma_tiles`` with 1 to ``max_splits`` splits
    (``min_split_k`` k each at least) is timed by a cost model: its rate, times the workgroups' share of
    the waves of ``slots`` they take, the share of its rows that are not past m, and ``mma_k0``'s factor
    for k per split, plus the reduction pass; the first that is not beaten by ``mma_margin`` wins."""
    t = tuning(device)
    g, slots = t.gemm, t.slots
    flops = 2 * m * n * k
    best = None
    for tile, rate in g.mma_tiles:
        bm, bn = 16 * tile["tm"], 16 * tile["tn"]
        for splits in range(1, g.max_splits + 1):
            if splits > 1 and k < g.min_split_k * splits:
                break
            wgs = -(-m // bm) * -(-n // bn) * splits
            fill = wgs / (-(-wgs // slots) * slots) * m / (-(-m // bm) * bm)
            ks = k / splits
            eff = ks / (ks + g.mma_k0) * (4096 + g.mma_k0) / 4096
            secs = flops / (rate * 1e12 * fill * eff)
            if splits > 1:
                secs += _reduce_s(t, m, n, splits)
            if best is None or secs < g.mma_margin * best[0]:
                best = (secs, {**tile, "bk": g.mma_bk, "splits": splits})
    return best[1], flops / best[0] / 1e12


def q8_round(x: np.ndarray, per: int = 32) -> np.ndarray:
    """The numpy twin of common/q8.wgsl ``xquant`` as the integer-dot GEMM's x pass (gemm_xq.wgsl) runs
    it, float64: each ``per`` consecutive values of a row rounded to the nearest multiple of d = max |x| /
    127 over them (x * (127 / max) exact, then rounded once, ties to even: the shader's multiply-add where a
    driver fuses it; where one does not, values at a tie may round the other way: ``q8_tie_free``)."""
    x = np.asarray(x, np.float32)
    g = x.reshape(*x.shape[:-1], -1, per)
    m = np.abs(g).max(axis=-1, keepdims=True)
    inv = np.divide(np.float32(127), m, out=np.zeros_like(m), where=m > 0)
    q = np.round(g.astype(np.float64) * inv.astype(np.float64))
    return (q * (m * np.float32(1 / 127)).astype(np.float64)).reshape(x.shape)


def q8_tie_free(x: np.ndarray, per: int = 32, margin: float = 2e-4) -> np.ndarray:
    """x (f32) with every value whose scaled x * 127 / max lies within ``margin`` of a rounding tie moved
    to the quarter point of its interval (the group maxima stay): test inputs on which a GPU's int8 x
    must equal ``q8_round``'s, since at a tie the shader may round either way (common/q8.wgsl)."""
    x = np.array(x, np.float32)
    g = x.reshape(-1, per)
    m = np.abs(g).max(axis=-1, keepdims=True).astype(np.float64)
    p = g * np.divide(127.0, m, out=np.zeros_like(m), where=m > 0)
    near = np.abs(p - np.floor(p) - 0.5) < margin
    g[near] = ((np.floor(p) + 0.25) * m / 127)[near]
    return x


@dataclass(frozen=True)
class TileConfig:
    """A tiled GEMM's register tile: TM x TN outputs per thread (4 or 8 each) of a 16 TM x 16 TN
    workgroup tile, BK (16 or 32) inner elements per step; ``splits`` > 1: split-k into that many partial
    GEMMs and a reduction pass (``gemm_reduce.wgsl``); ``loaders``: threads beside the 256 FMA threads
    that alone load and dequantize the tiles (0: the FMA threads do). ``q8``: the integer-dot kernel
    (``gemm_q8.wgsl``), whose steps are ``nb`` 32-element blocks (BK = 32 nb; ``bk`` unused). ``mma``: the
    matrix-unit kernel (``gemm_mma.wgsl``): a grid of tm / fm x tn / sn subgroups, each with fm x sn
    blocks of 16 x 16 (the same 16 tm x 16 tn tile; fm and sn 2 or 4), ``bk`` 32 or 64 k per step
    (``loaders`` and ``nb`` unused); ``half``: its ``HALF_TYPES`` weights dequantized in f16 arithmetic
    (``gemm_mma/<type>h.wgsl``; the twin: :func:`half_dequant`); ``wt``: weights staged transposed ([k][n]:
conflict-free stores for the loaders of 32-weight units). ``mmv``: the decode-batch matrix-unit kernel
(``gemm_mmv.wgsl``: one 16-row tile, ``16 tn`` weight rows a workgroup, ``splits`` summed by each column's
last workgroup, no reduction pass)."""

    tm: int = 8
    tn: int = 8
    bk: int = 16
    splits: int = 1
    loaders: int = 256
    q8: bool = False
    nb: int = 1
    mma: bool = False
    sn: int = 2
    fm: int = 2
    half: bool = False
    wt: bool = False
    raw16: bool = False
    mmv: bool = False

    @property
    def tile(self) -> tuple[int, int]:
        return 16 * self.tm, 16 * self.tn

    @property
    def subgroups(self) -> int:
        """The matrix-unit kernel's subgroups per workgroup."""
        return (self.tm // self.fm) * (self.tn // self.sn)

    def smem_bytes(self, wt_bytes: int = 4, fk: int = 32, mins: bool = False) -> int:
        """Workgroup memory, two buffers of: f32 x (BK x BM) and BK x BN weights of ``wt_bytes``; q8: int8
        x and weights, the x scales (and x sums with ``mins``) per block, the weight scales per ``fk``
        elements (and mins per block)."""
        if self.mma:   # f16 x and weight rows of bk + 8 padding (wt: bk rows of the tile's n + 8), a 16 x 16
            # f32 block per subgroup (<= 8)
            w = self.bk * (16 * self.tn + 8) if self.wt else (self.bk + 8) * 16 * self.tn
            return 2 * ((self.bk + 8) * 16 * self.tm + w) + 1024 * min(self.subgroups, 8)
        if not self.q8:
            return 2 * self.bk * (16 * self.tm * 4 + 16 * self.tn * wt_bytes)
        bm, bn, k = 16 * self.tm, 16 * self.tn, 32 * self.nb
        per = k * (bm + bn) + 4 * self.nb * bm * (1 + mins) + 4 * bn * (k // fk + self.nb * mins)
        return 2 * per

    def check(self) -> None:
        if self.tm not in (4, 8) or self.tn not in (4, 8) or self.bk not in (16, 32) or not 1 <= self.splits <= 64 \
                or self.loaders not in (0, 128, 256) or self.nb not in (1, 2):
            raise DeviceError(f"matmul: unsupported GEMM tile {self}")
        if not self.q8 and (16 * self.tn * self.bk // 8 > 256 or 16 * self.tm * self.bk // 4 > 512):
            raise DeviceError(f"matmul: GEMM tile {self} needs more than 256 weight chunks or 512 x vec4s a step")


def tile_config(m: int, n: int, k: int, q8: bool = False, device: str = GPU) -> TileConfig:
    """The register tile for an m x n output over k inner elements (n: the weight's rows); ``q8``: for the
    integer-dot kernel. 64-row tiles for short chunks; then each of the class's tiles with 1 to
    ``max_splits`` splits is timed by a cost model (waves of ``slots`` workgroups, each taking its tile's
    multiply-adds at the tile's rate, plus the reduction pass when split); a split or a narrower tile must
    win by ``split_margin`` (the integer-dot kernel's unsplit narrower tile by ``q8_unsplit_margin``)."""
    t = tuning(device)
    g = t.gemm
    tm = 4 if m <= g.short_rows else 8
    base = dict(q8=True) if q8 else {}
    best = None
    for fields, rel in (g.q8_tiles if q8 else g.f32_tiles):
        tile = TileConfig(**base, **fields)
        for splits in range(1, g.max_splits + 1):
            if k < g.min_split_k * splits:
                break
            wgs = -(-m // (16 * tm)) * -(-n // (16 * tile.tn)) * splits
            rate = (g.q8_rate if q8 else g.fma_rate) * rel
            secs = -(-wgs // t.slots) * 16 * tm * 16 * tile.tn * (k / splits) / rate
            if splits > 1:
                secs += _reduce_s(t, m, n, splits)
            margin = g.q8_unsplit_margin if q8 and splits == 1 else g.split_margin
            if best is None or secs < best[0] * margin:
                best = (secs, replace(tile, tm=tm, splits=splits))
    return best[1] if best else TileConfig(**base, **{**(g.q8_tiles if q8 else g.f32_tiles)[0][0], "tm": tm})


def over_gemv(dev: Device, m: int, qtype: str, n: int, k: int, glu: bool = False) -> Mapping[str, int] | None:
    """The matrix-unit tile of an m-row matmul of up to ``Tuning.gemv_rows`` rows that leaves the multi-row
    GEMV (``GemmTuning.mma_over_gemv``; n: weight rows, gate and up for the GLU), or None."""
    if m < 2 or not dev.has_mma or qtype not in MMA_TYPES or qtype == "F32":
        return None
    g = tuning(device_class(dev)).gemm
    tile = next((r.tile for r in g.mma_over_gemv if r.matches(m, n, k, glu)), None)
    if tile is None and qtype in g.mmv_types and n >= g.mmv_wide and g.mmv_min_rows <= m <= 16:
        return {}       # gemm_shader takes gemm_mmv.wgsl for these (no tiled-kernel tile)
    return tile


def mmv_splits(rows: int, k: int, device: str = GPU) -> int:
    """gemm_mmv.wgsl's split-k for ``rows`` weight rows over k (the GLU's gate and up rows together): the
    fewest of 1, 2, 4, 8 whose workgroups reach ``GemmTuning.mmv_fill`` of the class's slots, each split 2
    steps of 128 k at least."""
    t = tuning(device)
    wgs = -(-rows // (16 * MMV_SUBGROUPS))
    splits = next((s for s in (1, 2, 4, 8) if wgs * s >= t.gemm.mmv_fill * t.slots), 8)
    return max(1, min(splits, k // 256))


def gemm_shader(dev: Device, m: int, qtype: str, n: int = 0, override: Mapping[str, Any] | None = None,
                k: int = 0, glu: bool = False) -> tuple[str, dict[str, Any], TileConfig | None]:
    """The GEMM for m > 1 rows: (shader, extra defines, tile; None for gemm_q.wgsl's fixed 32x64).

    Prefill chunks (m >= TILED_MIN_ROWS) take a register-tiled kernel (``tile_config``; ``override``:
    TileConfig fields, for tests and benchmarks): the integer-dot one for ``Q8_TYPES`` where the adapter
    has ``int8_dots`` (``q8`` overrides), else f32 FMAs; fewer rows keep the 32x64 kernel, which wastes
    less of its tile. The f32 kernel's weight tiles are f32: dequantized values rounded to f16 (~2e-4
    relative) flipped seeded samples against the numpy backend (tests/test_reliability_wgpu.py), and F16
    weights, which f16 tiles hold exactly, ran faster in f32 tiles too (as measured); override ``f16``:
    True puts F16 weights in f16 tiles where the adapter has shader-f16.

    ``glu`` (matmul_glu: n gate rows then up rows, ``act(x Wg) * (x Wu)`` stored): only the matrix-unit
    kernel pairs them: unsplit in its epilogue, with 4 blocks along n per subgroup (2 gate, 2 up); split-k in
    the reduction pass, any tile; a DeviceError where it is not the kernel (:func:`glu_gemm`).
    """
    override = dict(override or {})
    f16_tiles = override.pop("f16", False)
    half = override.pop("half", None)       # not a tile choice: the default tile takes it too
    mmv = override.pop("mmv", None)         # tests: gemm_mmv.wgsl where it can run (True) or never (False),
    mmv_k = override.pop("mmv_splits", 0)   # ... with this split-k
    cls = device_class(dev)
    g = tuning(cls).gemm
    short = m < g.tiled_min_rows and not override
    over = over_gemv(dev, m, qtype, n, k, glu) if short and m < g.mma_min_rows else None
    # few rows (decode batches past the GEMV's, or left by it) still take the matrix units where the class allows
    short_mma = short and dev.has_mma and (0 < g.mma_min_rows <= m or over is not None) and qtype in MMA_TYPES \
        and qtype != "F32"
    if (mmv or (mmv is None and over is not None and qtype in g.mmv_types)) and qtype in MMV_TYPES and m <= 16 \
            and k % 256 == 0 and dev.has_mma:
        splits = mmv_k or mmv_splits(n, k, cls)
        cfg = TileConfig(tm=1, tn=MMV_SUBGROUPS, splits=splits, mma=True, half=True, mmv=True)
        smem = 2 * 16 * 136 * (MMV_SUBGROUPS + 2) + 16   # the shader's slots, two x buffers (16 rows of 136
        # halves each) and its split count
        if smem > dev.limits.get("max-compute-workgroup-storage-size", 16384):
            raise DeviceError(f"matmul: the decode-batch matrix-unit GEMM needs {smem} B of workgroup memory")
        return "gemm_mmv.wgsl", {"S": MMV_SUBGROUPS, "SPLITS": splits, "SMB": smem, "WLOAD": qtype.lower()}, cfg
    if glu and short and not short_mma:
        raise DeviceError("matmul: the GLU epilogue needs the matrix-unit GEMM (short chunks take gemm_q)")
    if short and not short_mma:
        return "gemm_q.wgsl", {}, None
    tile, tflops = mma_tile(m, n, k, cls)
    if glu:     # prefill chunks: the GLU in the epilogue, unsplit (decode batches may split: below)
        tile = {**tile, "splits": 1}
    decode = over or next((r.tile for r in g.mma_decode if r.matches(m, n, k, glu)), None)
    if decode and dev.has_mma and (over or g.mma_min_rows <= m <= g.short_rows) and qtype in MMA_TYPES \
            and qtype != "F32" and not override:
        splits = max(1, min(decode.get("splits", 1), k // g.min_split_k))
        tile, tflops, short_mma = {**decode, "bk": g.mma_bk, "splits": splits}, g.mma_q8_min_tflops, True
    if glu and tile["splits"] == 1:     # the epilogue's GLU pairs 2 gate and 2 up blocks of a subgroup
        tile = {**tile, "sn": 4, "tn": max(tile["tn"], 4)}
    # F32 weights keep their f32 GEMMs unless asked (f16 products would round what the file keeps exact)
    fast = short_mma or qtype == "F16" or (qtype in MMA_TYPES and qtype != "F32" and tflops >= g.mma_q8_min_tflops)
    if override.get("mma", dev.has_mma and fast and not override):
        cfg = TileConfig(**{**tile, "mma": True, "half": qtype in g.mma_half_types if half is None else half,
                            "raw16": g.mma_raw16, **override})
        if cfg.half and qtype not in HALF_TYPES:
            cfg = replace(cfg, half=False)     # asked for every type (tests, sweeps): where a loader has it
        if qtype not in MMA_TYPES or cfg.fm not in (2, 4) or cfg.tm not in (cfg.fm, 2 * cfg.fm, 4 * cfg.fm) \
                or cfg.sn not in (2, 4) or cfg.tn not in (cfg.sn, 2 * cfg.sn, 4 * cfg.sn) \
                or cfg.bk not in (32, 64) or not 1 <= cfg.splits <= 8 or 2 * cfg.tm * cfg.bk % (32 * cfg.subgroups):
            raise DeviceError(f"matmul: no matrix-unit GEMM for {qtype} with tile {cfg}")
        if glu and cfg.sn != 4 and cfg.splits == 1:
            raise DeviceError(f"matmul: the unsplit GLU epilogue needs 4 blocks along n, not {cfg}")
        # 64 k per step (half the barriers) where it fits, else 32
        cfg = _fit_limits(dev, cfg, m, n, TileConfig.smem_bytes, None if "bk" in override else {"bk": 32})
        wload = "f16" if qtype == "F16" else f"{qtype.lower()}h" if cfg.half else \
            ("q32r16" if cfg.raw16 else "q32r") if qtype in RAW_TYPES else "q32" if qtype in Q8_TYPES else "dq8"
        if cfg.wt and wload in ("f16", "dq8"):
            raise DeviceError(f"matmul: transposed weight staging (wt) takes 32-weight units, not {wload}")
        bn = 16 * cfg.tn
        return ("gemm_mma.wgsl", {"SGM": cfg.tm // cfg.fm, "SGN": cfg.tn // cfg.sn, "FM": cfg.fm, "TNB": cfg.sn,
                                  "BK": cfg.bk,
                                  "SPLITS": cfg.splits,
                                  "WLOAD": wload, "WT": bool(cfg.wt),
                                  "WSLEN": cfg.bk * (bn + 8) if cfg.wt else bn * (cfg.bk + 8)}, cfg)
    if glu:
        raise DeviceError("matmul: the GLU epilogue needs the matrix-unit GEMM")
    q8 = override.get("q8", dev.int8_dots and qtype in Q8_TYPES and m <= 65535)
    if q8 and qtype not in Q8_TYPES:
        raise DeviceError(f"matmul: no integer-dot GEMM for weight type {qtype}")
    cfg = TileConfig(**{**tile_config(m, n, k, q8, cls).__dict__, **override})
    cfg.check()
    if 256 + cfg.loaders > dev.limits.get("max-compute-invocations-per-workgroup", 256):
        cfg = replace(cfg, loaders=0)       # the FMA threads load too
    f16 = f16_tiles and qtype == "F16" and dev.has_f16
    smem = lambda c: c.smem_bytes(2 if f16 else 4, fk=16 if qtype in Q8_FK16 else 32, mins=qtype in Q8_MINS)
    # one block per step where two do not fit: half the workgroup memory (lavapipe: 32 KiB)
    cfg = _fit_limits(dev, cfg, m, n, smem, {"nb": 1} if cfg.q8 and "nb" not in override else None)
    if cfg.q8:
        return ("gemm_q8.wgsl", {"TM": cfg.tm, "TN": cfg.tn, "NB": cfg.nb, "SPLITS": cfg.splits,
                                 "NL": cfg.loaders, "LT": cfg.loaders or 256}, cfg)
    return ("gemm_tiled.wgsl", {"WT": "f16" if f16 else "f32", "WT_ENABLE": "enable f16;" if f16 else "",
                                "TM": cfg.tm, "TN": cfg.tn, "BK": cfg.bk, "SPLITS": cfg.splits,
                                "NL": cfg.loaders}, cfg)


def glu_gemm(dev: Device, m: int, qtype: str, n: int, k: int, override: Mapping[str, Any] | None = None) -> bool:
    """Whether an m-row ``matmul_glu`` over n gate + up rows runs as one GEMM with the GLU epilogue."""
    try:
        gemm_shader(dev, m, qtype, n, override, k, glu=True)
    except DeviceError:
        return False
    return True


def _fit_limits(dev: Device, cfg: TileConfig, m: int, n: int, smem: Callable[[TileConfig], int],
                shrink: dict[str, int] | None) -> TileConfig:
    """``cfg`` within the adapter's limits: unsplit where split-k's partial sums would not fit one binding;
    with ``shrink``'s fields where its workgroup memory (``smem``) would not fit; else a DeviceError."""
    if cfg.splits > 1 and 4 * cfg.splits * m * n > dev.max_storage_binding:
        cfg = replace(cfg, splits=1)
    limit = dev.limits.get("max-compute-workgroup-storage-size", 16384)
    if shrink and smem(cfg) > limit:
        cfg = replace(cfg, **shrink)
    if smem(cfg) > limit:
        raise DeviceError(f"matmul: GEMM tile {cfg} needs {smem(cfg)} B of workgroup memory; the adapter allows "
                          f"{limit}")
    return cfg


def gemm_grid(tile: tuple[int, int], m: int, rows: int, splits: int = 1) -> tuple[int, int, int]:
    """Workgroups for ``rows`` weight rows (output columns) and ``m`` x rows with (BM, BN) tiles."""
    return (-(-rows // tile[1]), -(-m // tile[0]), splits)


_SCRATCH: weakref.WeakKeyDictionary[Device, dict[str, list[Any]]] = weakref.WeakKeyDictionary()
_SCRATCH_LOCK = threading.Lock()


def scratch_buffer(dev: Device, nbytes: int, kind: str) -> Any:
    """A device-wide buffer of at least ``nbytes`` per ``kind`` (split-k partial sums, int8 x). One is
    shared by every GEMM (dispatches run in order, and wgpu orders each dispatch's writes before the next
    one's reads); a larger need replaces it for later GEMMs while earlier bind groups keep theirs (kept
    alive here). Locked: kernels are encoded on several threads at load (``WgpuBackend.compile_threads``)."""
    with _SCRATCH_LOCK:
        bufs = _SCRATCH.setdefault(dev, {}).setdefault(kind, [])
        if not bufs or bufs[-1].size < nbytes:
            bufs.append(dev.create_buffer(max(nbytes, 2 * bufs[-1].size if bufs else 0),
                                          label=f"gemm {kind} scratch"))
        return bufs[-1]


class GemmKernel:
    """The m > 1 GEMM of one matmul (``matmul.Gemm`` with its ``defines``): pipelines and dispatches.

    ``override``: TileConfig fields (plus ``f16``: True puts F16 weights in f16 tiles) replacing the
    choice, which also forces the tiled kernel below TILED_MIN_ROWS (tests, benchmarks).

    ``grouped``: matmul_id's grouped GEMM over experts (common/gemm_id_true.wgsl's defines NE, IDO, KSEL,
    XSLOT; ops/moe.py): m is x's rows, ``tile_rows`` the pairs an expert's tile is expected to hold (the
    tile is picked for that many rows), unsplit; one of the three tiled kernels, never gemm_q.wgsl.
    """

    def __init__(self, dev: Device, m: int, k: int, n: int, qtype: str, defines: Mapping[str, Any],
                 override: Mapping[str, Any] | None = None, norm_eps: float | None = None,
                 grouped: Mapping[str, Any] | None = None, tile_rows: int = 0, rows_per_token: int = 1):
        self.dev, self.m, self.k, self.qtype = dev, m, k, qtype
        defines = {"GLU": False, "ACT": "silu", "ID": bool(grouped), **(grouped or {}), **defines}
        if grouped:     # a tiled kernel for tile_rows rows, unsplit (the matrix units where the class takes them;
            # their 32-row tile where an expert's tile holds no more: half the 64-row tiles would be padding)
            mma = dev.has_mma and qtype in MMA_TYPES and qtype != "F32"
            small = {"tm": 2, "tn": 8, "sn": 4} if mma and tile_rows <= 32 else {}
            # the q32 loaders (ops/moe.py's twin rounds the float weights to f16; the f16-arithmetic ones
            # are unmeasured there)
            override = {"splits": 1, "mma": mma, "half": False, **small, **(override or {})}
        shader, extra, self.cfg = gemm_shader(dev, tile_rows or m, qtype, n, override, k=k, glu=defines["GLU"])
        if grouped and self.cfg is None:
            raise DeviceError(f"matmul_id: no tiled GEMM for {qtype} rows of {k}")
        self.tile = self.cfg.tile if self.cfg else (GEMM_BM, GEMM_BN)
        self.splits = self.cfg.splits if self.cfg else 1
        self.q8 = bool(self.cfg and self.cfg.q8)
        self.mma = bool(self.cfg and self.cfg.mma)
        self.mmv = bool(self.cfg and self.cfg.mmv)
        # the matrix-unit kernel's x pass applies the RMS norm of a norm prologue (one workgroup per row);
        # gemm_mmv.wgsl rounds x itself where there is none, and sums its splits itself
        self.norm_xpass = self.mma and norm_eps is not None
        if self.mmv:
            extra = {**extra, "XSRC": "f16" if self.norm_xpass else "f32"}
        self.pipe = dev.pipeline(shader, defines={**defines, **extra})
        self.reduce = (dev.pipeline("gemm_reduce.wgsl", defines={**defines, "SPLITS": self.splits})
                       if self.splits > 1 and not self.mmv else None)
        self.glu = bool(defines["GLU"])
        wload = extra.get("WLOAD", "")
        self.w16 = bool(self.cfg and self.cfg.mma and (self.cfg.half or wload == "q32r16")) \
            and not (self.mmv and qtype != "Q4_K")     # gemm_mmv/q6_k.wgsl reads W as words
        self.w16_only = self.w16 and (qtype == "Q4_K" or wload == "q32r16")   # loaders that read W only so
        io = {"HAS_BIAS": False, "HAS_RES": False, "NSEG": 1, "RPT": rows_per_token}
        xh = {**io, "WG": 256 if self.norm_xpass else 64, "HAS_NORM": self.norm_xpass,
              "PERM4": self.mmv,
              "EPS": f32_lit(norm_eps or 0.0), "RED": "sg" if dev.has_subgroups else "wg"}
        self.xpass = (dev.pipeline("gemm_xq.wgsl", defines=io) if self.q8 else
                      dev.pipeline("gemm_xh.wgsl", defines=xh) if self.mma and (self.norm_xpass or not self.mmv)
                      else None)

    def x_pass(self, dims: Binding, x: Binding, nw: Binding | None = None) -> tuple[list[Dispatch], dict[int, Binding]]:
        """For the integer-dot kernel: the dispatch rounding x (``dims``: any of this GEMM's, for k and m)
        to int8 into a shared scratch buffer, once per input, and the bindings (6, 8) through which
        :meth:`encode`'s dispatches read it; for the matrix-unit kernel x in f16 (binding 6; RMS-normed
        with ``nw``, the norm weights, where built with ``norm_eps``); for the f32 kernel, and gemm_mmv.wgsl
        without a norm (it rounds x as it stages it), nothing."""
        if self.xpass is None:
            return [], {}
        if self.mma:        # one thread per 8 elements
            nh = 2 * self.m * self.k
            xb, per_group = {6: (scratch_buffer(self.dev, nh, "f16 x"), 0, nh)}, 512
        elif self.q8:       # one thread per 32-block
            nq, nd = self.m * self.k, 8 * self.m * (self.k // 32)
            off = -(-nq // self.dev.storage_align) * self.dev.storage_align
            buf = scratch_buffer(self.dev, off + nd, "int8 x")
            xb, per_group = {6: (buf, 0, nq), 8: (buf, off, nd)}, 2048
        else:
            return [], {}
        binds = {PARAMS_BINDING: self.dev.params_buffer, 1: dims, 2: x, **xb}
        if self.mma:     # gemm_xh.wgsl's norm weights (read only with the norm)
            binds[8] = nw if self.norm_xpass else x
        bg = self.dev.bind_group(self.xpass, binds)
        return [Dispatch(self.xpass, bg, (1 if self.norm_xpass else -(-self.k // per_group), self.m, 1))], xb

    def encode(self, binds: Mapping[int, Binding], rows: int, row_tiles: int = 0) -> list[Dispatch]:
        """Dispatches for one weight row range: ``binds`` as matmul_io.wgsl declares them (1 dims, 2 x,
        3 W, 4 bias, 5 y, 7 res; the integer-dot and matrix-unit kernels read x through :meth:`x_pass`'s 6
        (and 8) instead of 2), ``rows`` the range's weight rows; ``row_tiles``: the grouped GEMM's tiles
        (the grid's rows of workgroups, one per tile of the table at binding 15)."""
        grid = gemm_grid(self.tile, self.m, rows, self.splits)
        if row_tiles:
            grid = (grid[0], row_tiles, 1)
        binds = {PARAMS_BINDING: self.dev.params_buffer, **binds,   # n_tokens: padding row tiles exit
                 **grid_binds(self.dev, self.qtype)}
        if self.xpass is not None:
            binds = {i: b for i, b in binds.items() if i != 2}
        if self.w16:
            binds[W16_BINDING] = binds.pop(3) if self.w16_only else binds[3]
        if self.splits == 1 and not self.mmv:
            return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, binds), grid)]
        nbytes = 4 * self.splits * self.m * rows
        part = (scratch_buffer(self.dev, nbytes, "split-k"), 0, nbytes)
        if self.mmv:        # one dispatch: the last workgroup of a column sums the splits (a counter each;
            # both buffers bound unsplit too: the shader names them)
            cnt = (scratch_buffer(self.dev, 4 * grid[0], "mmv counters"), 0, 4 * grid[0])
            return [Dispatch(self.pipe, self.dev.bind_group(self.pipe, {**binds, 13: part, 14: cnt}), grid)]
        gemm = Dispatch(self.pipe, self.dev.bind_group(self.pipe, {**binds, 5: part}), grid)
        red = {i: binds[i] for i in (PARAMS_BINDING, 1, 4, 5, 7)} | {6: part}
        outs = rows // 2 if self.glu else rows      # GLU: one output per gate and up row pair
        return [gemm, Dispatch(self.reduce, self.dev.bind_group(self.reduce, red), (-(-outs // 256), self.m, 1))]
