"""The register-tiled prefill GEMM (``shaders/gemm_tiled.wgsl``, ``ops/gemm.py``) vs float64 references.

Every register tile (TM x TN outputs per thread, BK per step), with and without loader threads, split-k
with its reduction pass, every weight type, bias, the residual and multi-output epilogues and the binding
split, in the math the adapter gets (f16 with f32 flushes where it has shader-f16, as lavapipe does) and
forced f32. Shapes leave partial tiles in every dimension: m and n are not tile multiples, and k is not a
multiple of BK where the block size allows (F32/F16/BF16 at k = 200; 32-element blocks at k = 224 against
BK = 32). Tolerance: f32 math as test_kernel_matmul.py, max |err| / max |ref| <= 2e-7 sqrt(k); f16 math
element-wise within ``ops/gemm.error_bound`` (gemm_tiled.wgsl's header derives it) plus one f32 rounding
of the epilogue. Inputs are random and non-zero, outputs NaN-poisoned.
"""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.backends.wgpu.device import Device
from oxigpu.backends.wgpu.kernel import rel_error, run_op
from oxigpu.backends.wgpu.ops.gemm import (TILED_MIN_ROWS, GemmKernel, TileConfig, error_bound, gemm_shader,
                                           tile_config)
from oxigpu.backends.wgpu.ops.matmul import TYPES, matmul_add_case, matmul_case, matmul_multi_case
from oxigpu.errors import DeviceError
from oxigpu.quant import dequantize, get_type

pytestmark = pytest.mark.gpu

TILES = [dict(tm=8, tn=8, bk=16), dict(tm=8, tn=4, bk=16), dict(tm=4, tn=8, bk=16), dict(tm=4, tn=4, bk=16),
         dict(tm=4, tn=4, bk=32), dict(tm=8, tn=8, bk=16, loaders=0), dict(tm=4, tn=8, bk=16, loaders=0),
         dict(tm=4, tn=4, bk=32, loaders=128), dict(tm=8, tn=4, bk=16, loaders=128)]
"""Register tiles (TM x TN per thread, BK), with the default 256 loader threads, none (the FMA threads
load) or 128 (one to four chunks per loader)."""
NOSPLIT = {"splits": 1, "loaders": 256}


def _k(t: str) -> int:
    """An inner size that is a block multiple but, where the block allows, not a multiple of BK."""
    if t in ("F32", "F16", "BF16"):
        return 200
    return 224 if get_type(t).block_size == 32 else 768


def _within(case, got: list[np.ndarray], dev, gemm: dict | None, rows: int | None = None) -> tuple[bool, str]:
    """Whether ``got`` matches ``case.reference()`` (its first ``rows`` rows) within the bound of the math
    its GEMM runs in."""
    x = case.inputs[0]
    weights = [(a, t) for a, t in zip(case.inputs, case.in_types) if t != "f32"]
    _, extra, _ = gemm_shader(dev, x.shape[0], weights[0][1], len(weights[0][0]), gemm, k=x.shape[1])
    refs = [r[:rows] for r in case.reference()]
    got, x = [g[:rows] for g in got], x[:rows]
    assert all(np.abs(r).max() > 1 for r in refs)          # never a comparison on zeros
    if extra.get("MT", "f32") == "f32":
        err = max(rel_error(g, r) for g, r in zip(got, refs))
        return err <= case.tol, f"{case.name} {gemm}: f32 rel. error {err:.3g} > {case.tol:.3g}"
    worst = 0.0
    for g, r, (raw, t) in zip(got, refs, weights):
        w = dequantize(raw, get_type(t)).astype(np.float64)
        bound = error_bound(x.astype(np.float64), w, "f16", extra["BK"], extra["FLUSH"]) + 2.0 ** -23 * np.abs(r)
        worst = max(worst, float(np.nanmax(np.abs(g - r) / bound)) if np.isfinite(g).all() else np.inf)
    return worst <= 1, f"{case.name} {gemm}: f16 error {worst:.3g} x its bound"


def _run(case, dev, gemm: dict | None = None) -> None:
    attrs = {**case.attrs, **({"gemm": gemm} if gemm is not None else {})}
    ok, msg = _within(case, run_op(case.op, case.inputs, attrs, in_types=case.in_types, dev=dev), dev, gemm)
    assert ok, msg


@pytest.mark.parametrize("t", TYPES)
def test_every_type_default_tile(dev, t):
    """The tile prefill chunks get, every weight type, partial tiles in m, n and (where allowed) k."""
    _run(matmul_case(t, 150, _k(t), 203, bias=True, seed=1), dev)


@pytest.mark.parametrize("tile", range(len(TILES)))
@pytest.mark.parametrize("t", ["Q4_K", "Q5_0", "Q6_K", "Q8_0", "F16", "F32"])
def test_every_tile(dev, t, tile):
    _run(matmul_case(t, 150, _k(t), 203, bias=tile % 2 == 0, seed=10 + tile), dev, {**NOSPLIT, **TILES[tile]})


@pytest.mark.parametrize("splits", [2, 3, 4, 7])
@pytest.mark.parametrize("t", ["Q4_K", "Q5_0", "BF16"])
def test_split_k(dev, t, splits):
    """Split-k partial GEMMs and the reduction: uneven splits, bias added once, not per split."""
    tile = TILES[(splits + len(t)) % len(TILES)]
    _run(matmul_case(t, 70, 2 * _k(t), 131, bias=True, seed=20 + splits), dev, {**NOSPLIT, **tile, "splits": splits})


def test_split_k_with_empty_splits(dev):
    """k = 64 over 4 splits of BK = 32: splits 2 and 3 have no inner elements (they add zeros)."""
    _run(matmul_case("F16", 40, 64, 70, bias=True, seed=30), dev, dict(tm=4, tn=4, bk=32, splits=4))


@pytest.mark.parametrize("gemm", [None, dict(tm=8, tn=4, bk=16, splits=3)])
def test_epilogues(dev, gemm):
    """Residual, multi-output segments (with biases) and a binding split, with and without split-k."""
    _run(matmul_add_case("Q6_K", 65, 1024, 129, bias=True, seed=31), dev, gemm)
    _run(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 40, 1024, (70, 130, 67), True, seed=32), dev, gemm)
    with dev.binding_limit(20000):
        _run(matmul_case("Q8_0", 140, 640, 203, bias=True, seed=33), dev, gemm)


@pytest.mark.parametrize("t", ["Q4_K", "Q8_0", "F16", "F32"])
def test_f32_math(dev, t, monkeypatch):
    """f32 math on request and on adapters without shader-f16, at the f32 tolerance."""
    _run(matmul_case(t, 70, _k(t), 130, bias=True, seed=40), dev, {"math": "f32"})
    monkeypatch.setattr(Device, "has_f16", property(lambda self: False))
    _run(matmul_case(t, TILED_MIN_ROWS, _k(t), 67, bias=False, seed=41), dev)
    with pytest.raises(DeviceError, match="math"):
        GemmKernel(dev, 64, 512, 70, t, {}, {"math": "f16"})


@pytest.mark.parametrize("flush", [1, 3])
def test_f16_math_flushes(dev, flush):
    """f16 math, every flush period: element-wise within the bound, split-k included."""
    if not dev.has_f16:
        pytest.skip("no shader-f16")
    _run(matmul_case("Q4_K", 70, 1024, 131, bias=True, seed=42 + flush), dev, {"math": "f16", "flush": flush})
    _run(matmul_case("Q5_0", 70, 640, 131, bias=True, seed=44 + flush), dev,
         {"math": "f16", "flush": flush, "splits": 3, "tm": 4, "tn": 8})


def test_f16_sums_are_flushed(dev):
    """x = W = 1, k = 4096: every product and 16-term sum is exact in f16, so the flushed result is exactly
    4096; one f16 accumulator over all of k would stall at 2048 (2048 + 1 rounds back to 2048)."""
    if not dev.has_f16:
        pytest.skip("no shader-f16")
    k = 4096
    x, raw = np.ones((40, k), np.float32), np.ones((67, k), np.float16).view(np.uint8)
    y = run_op("matmul", [x, raw], {"gemm": {"math": "f16"}}, in_types=["f32", "F16"], dev=dev)[0]
    assert (y == k).all(), np.unique(y)


def test_few_rows_forced_tiled(dev):
    """An override forces the tiled kernel below TILED_MIN_ROWS (3 rows of a 128-row tile)."""
    _run(matmul_case("Q4_K", 3, 512, 70, bias=True, seed=41), dev, dict(NOSPLIT, tm=8, tn=8, bk=16))


def test_a_wrong_result_fails(dev):
    """The check can fail: another seed's weights are far outside the bound, in either math."""
    for gemm in ({}, {"math": "f32"}):
        case = matmul_case("Q4_K", 64, 512, 70, bias=False, seed=42)
        other = matmul_case("Q4_K", 64, 512, 70, bias=False, seed=43)
        got = run_op(case.op, case.inputs, {"gemm": gemm}, in_types=case.in_types, dev=dev)
        assert _within(case, got, dev, gemm)[0]
        assert not _within(other, got, dev, gemm)[0]
        assert rel_error(got[0], other.reference()[0]) > 100 * case.tol


SHAPES = [(896, 896), (1152, 896), (9728, 896), (896, 4864), (2048, 2048), (3072, 2048), (16384, 2048),
          (2048, 8192), (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]
"""(n, k) of the prefill GEMMs of Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B (q/k/v and gate/up joined)."""


@pytest.mark.parametrize("m", [33, 64, 512])
def test_tile_choice_is_valid(m):
    """Every chosen tile passes its own checks and fits the 32 KiB of workgroup memory lavapipe allows."""
    for n, k in SHAPES:
        cfg = tile_config(m, n, k)
        cfg.check()
        assert cfg.smem_bytes() <= 32768, (m, n, k, cfg)


def test_bad_tiles_are_refused(dev):
    for bad in [dict(tm=2), dict(tn=16), dict(bk=8), dict(bk=32, tm=8), dict(splits=0), dict(loaders=64),
                dict(math="f64"), dict(flush=0)]:
        with pytest.raises(DeviceError):
            GemmKernel(dev, 64, 512, 70, "Q4_K", {}, bad)
    assert TileConfig(tm=8, tn=8, bk=16).smem_bytes() == 32768 and TileConfig().smem_bytes(2) == 16384


@pytest.mark.parametrize("gemm", [None, dict(tm=4, tn=4, bk=16, splits=3)])
def test_row_tiles_past_n_tokens_are_skipped(dev, gemm):
    """A short prompt in a longer prefill plan: rows below n_tokens as in float64, and row tiles wholly at
    or past n_tokens never written (they keep the NaN poison): their work was skipped, not just masked."""
    case = matmul_case("Q4_K", 300, 768, 203, bias=True, seed=3)
    n_tokens = 20
    got = run_op(case.op, case.inputs, {**case.attrs, **({"gemm": gemm} if gemm else {})}, n_tokens=n_tokens,
                 in_types=case.in_types, dev=dev)[0]
    ok, msg = _within(case, [got], dev, gemm, rows=n_tokens)
    assert ok, msg
    bm = TileConfig(**{**tile_config(300, 203, 768).__dict__, **(gemm or {})}).tile[0]
    assert bm < 300 and np.isnan(got[bm:]).all()
