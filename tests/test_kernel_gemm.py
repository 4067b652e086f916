"""The register-tiled prefill GEMMs (``shaders/gemm_tiled.wgsl``, ``shaders/gemm_q8.wgsl``, ``ops/gemm.py``)
vs float64 references.

Every register tile (TM x TN outputs per thread, BK per step), with and without loader threads, split-k
with its reduction pass, every weight type, bias, the residual and multi-output epilogues and the binding split.
Shapes leave partial tiles in every dimension: m and n are not tile multiples, and k is not a multiple of BK where
the block size allows (F32/F16/BF16 at k = 200; 32-element blocks at k = 224 against BK = 32). Tolerance as in
test_kernel_matmul.py: max |err| / max |ref| <= 2e-7 sqrt(k) (f32 weights, f32 accumulation); inputs are random and
non-zero, outputs NaN-poisoned. The integer-dot kernel (forced here with ``q8``: lavapipe has no ``int8_dots``) is
held to the same bound against its numpy twin, float64 products of x rounded to int8 per 32 (ops/gemm.py
``q8_round``), on x kept off rounding ties (``q8_tie_free``: at a tie the shader may round either way).
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from test_kernel_matmul import _run_multi_joined

from oxigpu.backends.wgpu.device import Device, Params
from oxigpu.backends.wgpu.kernel import rel_error, run_op
from oxigpu.backends.wgpu.layout import gpu_layout
from oxigpu.backends.wgpu.ops.gemm import (
    MMA_TYPES,
    Q8_TYPES,
    TILED_MIN_ROWS,
    GemmKernel,
    TileConfig,
    gemm_shader,
    glu_gemm,
    half_dequant,
    tile_config,
)
from oxigpu.backends.wgpu.ops.matmul import (
    TYPES,
    MatmulGluKernel,
    matmul_add_case,
    matmul_case,
    matmul_glu_case,
    matmul_multi_case,
    mma_gemm_case,
    q8_gemm_case,
)
from oxigpu.errors import DeviceError
from oxigpu.quant import get_type

pytestmark = pytest.mark.gpu

TILES = [dict(tm=8, tn=8, bk=16), dict(tm=8, tn=4, bk=16), dict(tm=4, tn=8, bk=16), dict(tm=4, tn=4, bk=16),
         dict(tm=4, tn=4, bk=32), dict(tm=8, tn=8, bk=16, loaders=0), dict(tm=4, tn=8, bk=16, loaders=0),
         dict(tm=4, tn=4, bk=32, loaders=128), dict(tm=8, tn=4, bk=16, loaders=128)]
"""Register tiles (TM x TN per thread, BK), with the default 256 loader threads, none (the FMA threads
load) or 128 (one to four chunks per loader)."""
NOSPLIT = {"splits": 1, "loaders": 256, "q8": False}   # the f32 kernel, also where int8 dots are on


def _k(t: str) -> int:
    """An inner size that is a block multiple but, where the block allows, not a multiple of BK."""
    if t in ("F32", "F16", "BF16"):
        return 200
    return 224 if get_type(t).block_size == 32 else 768


def _err(case, dev, gemm: dict | None) -> float:
    attrs = {**case.attrs, **({"gemm": gemm} if gemm is not None else {})}
    got = run_op(case.op, case.inputs, attrs, in_types=case.in_types, dev=dev)
    ref = case.reference()
    assert all(np.abs(r).max() > 1 for r in ref)          # never a comparison on zeros
    return max(rel_error(g, r) for g, r in zip(got, ref))


def _uses(case, dev, gemm: dict | None, kind: str) -> bool:
    """Whether ``case`` runs the integer-dot kernel (``kind`` "q8") or the matrix-unit one ("mma"): where
    asked for, or by default on adapters with int8 dots (the H100; not lavapipe) or subgroup matrices
    (the H100 under Dawn). Each weight's own row count: the matrix-unit choice depends on it, and run_op
    uploads every weight on its own, so each gets its own GEMM."""
    m, k = case.inputs[0].shape
    cfgs = [gemm_shader(dev, m, t, w.shape[0], gemm, k)[2]
            for w, t in zip(case.inputs[1:], case.in_types[1:]) if t != "f32"]
    return all(c is not None and getattr(c, kind) for c in cfgs)


def _half(case, dev, gemm: dict | None) -> list[str]:
    """The weight types ``case``'s matrix-unit GEMMs stage through their f16-arithmetic loaders."""
    m, k = case.inputs[0].shape
    return [t for w, t in zip(case.inputs[1:], case.in_types[1:])
            if t != "f32" and gemm_shader(dev, m, t, w.shape[0], gemm, k)[2].half]


def _run(case, dev, gemm: dict | None = None) -> None:
    """Runs ``case`` against float64; on the integer-dot or matrix-unit kernel against its twin
    (``q8_gemm_case``, ``mma_gemm_case``)."""
    if _uses(case, dev, gemm, "q8"):
        case = q8_gemm_case(case)
    elif _uses(case, dev, gemm, "mma"):
        case = mma_gemm_case(case, _half(case, dev, gemm))
    err = _err(case, dev, gemm)
    assert err <= case.tol, f"{case.name} {gemm}: rel. error {err:.3g} > {case.tol:.3g}"


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


@pytest.mark.parametrize("gemm", [None, dict(tm=8, tn=4, bk=16, splits=3, q8=False)])
def test_epilogues(dev, gemm):
    """Residual, multi-output segments (with biases) and a binding split, with and without split-k."""
    _run(matmul_add_case("Q6_K", 65, 1024, 129, bias=True, seed=31), dev, gemm)
    _run(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 40, 1024, (70, 130, 67), True, seed=32), dev, gemm)
    with dev.binding_limit(20000):
        _run(matmul_case("Q8_0", 140, 640, 203, bias=True, seed=33), dev, gemm)


@pytest.mark.parametrize("t,k", [("F16", 200), ("F16", 1024)])
def test_f16_weights_in_f32_and_f16_tiles(dev, t, k):
    """F16 weights take f32 tiles; f16 tiles (on request, with shader-f16) hold them exactly too."""
    _run(matmul_case(t, TILED_MIN_ROWS, k, 67, bias=False, seed=40), dev, {})
    _run(matmul_case(t, TILED_MIN_ROWS, k, 67, bias=False, seed=40), dev, {"f16": True})


def test_few_rows_forced_tiled(dev):
    """An override forces the tiled kernel below TILED_MIN_ROWS (3 rows of a 128-row tile)."""
    _run(matmul_case("Q4_K", 3, 512, 70, bias=True, seed=41), dev, dict(NOSPLIT, tm=8, tn=8, bk=16))


def test_a_wrong_result_fails(dev):
    """The check can fail: another seed's weights are far outside the tolerance."""
    case = matmul_case("Q4_K", 64, 512, 70, bias=False, seed=42)
    other = matmul_case("Q4_K", 64, 512, 70, bias=False, seed=43)
    got = run_op(case.op, case.inputs, {"gemm": {"q8": False}}, in_types=case.in_types, dev=dev)
    assert rel_error(got[0], other.reference()[0]) > 100 * case.tol
    assert rel_error(got[0], case.reference()[0]) <= case.tol


SHAPES = [(896, 896), (1152, 896), (9728, 896), (896, 4864), (2048, 2048), (3072, 2048), (16384, 2048),
          (2048, 8192), (4096, 4096), (6144, 4096), (28672, 4096), (4096, 14336)]
"""(n, k) of the prefill GEMMs of Qwen2.5-0.5B, Llama-3.2-1B and Llama-3.1-8B (q/k/v and gate/up joined)."""


@pytest.mark.parametrize("m", [33, 64, 512])
def test_tile_choice_is_valid(m):
    """Every chosen tile passes its own checks and fits the 32 KiB of workgroup memory lavapipe allows;
    the integer-dot one (48 KiB on the H100) does with one block per step."""
    for n, k in SHAPES:
        cfg = tile_config(m, n, k)
        cfg.check()
        assert cfg.smem_bytes() <= 32768, (m, n, k, cfg)
        q8 = tile_config(m, n, k, q8=True)
        q8.check()
        for fk, mins in ((16, False), (32, True)):         # Q6_K's scales per 16, Q4_K's mins
            assert q8.smem_bytes(fk=fk, mins=mins) <= 49152, (m, n, k, q8)
            assert replace(q8, nb=1).smem_bytes(fk=fk, mins=mins) <= 32768, (m, n, k, q8)


def test_bad_tiles_are_refused(dev):
    for bad in [dict(tm=2), dict(tn=16), dict(bk=8), dict(bk=32, tm=8), dict(splits=0), dict(loaders=64)]:
        with pytest.raises(DeviceError):
            GemmKernel(dev, 64, 512, 70, "Q4_K", {}, {"q8": False, **bad})
    with pytest.raises(DeviceError):
        GemmKernel(dev, 64, 512, 70, "Q4_K", {}, dict(q8=True, nb=4))
    assert TileConfig(tm=8, tn=8, bk=16).smem_bytes() == 32768


@pytest.mark.parametrize("gemm", [dict(q8=False), dict(tm=4, tn=4, bk=16, splits=3, q8=False)])
def test_row_tiles_past_n_tokens_are_skipped(dev, gemm):
    """A short prompt in a longer prefill plan: rows below n_tokens as in float64, and row tiles wholly at
    or past n_tokens never written (they keep the NaN poison): their work was skipped, not just masked."""
    case = matmul_case("Q4_K", 300, 768, 203, bias=True, seed=3)
    n_tokens = 20
    got = run_op(case.op, case.inputs, {**case.attrs, **({"gemm": gemm} if gemm else {})}, n_tokens=n_tokens,
                 in_types=case.in_types, dev=dev)[0]
    want = case.reference()[0][:n_tokens]
    assert np.abs(want).max() > 1 and rel_error(got[:n_tokens], want) <= case.tol
    bm = TileConfig(**{**tile_config(300, 203, 768).__dict__, **(gemm or {})}).tile[0]
    assert bm < 300 and np.isnan(got[bm:]).all()


# -- the integer-dot kernel (gemm_q8.wgsl) --------------------------------------------------------------

Q8_TILES = [dict(tm=8, tn=8, nb=1, loaders=128), dict(tm=8, tn=8, nb=1, loaders=0), dict(tm=8, tn=4, nb=1, loaders=256),
            dict(tm=4, tn=8, nb=2, loaders=128), dict(tm=8, tn=4, nb=2, loaders=0), dict(tm=4, tn=4, nb=2, loaders=256)]
"""Integer-dot tiles: TM x TN per thread, nb 32-blocks per step, loader threads (0: the compute threads).
Each one within lavapipe's 32 KiB of workgroup memory."""


@pytest.mark.parametrize("t", Q8_TYPES)
def test_q8_every_type(dev, t):
    """Every type with integer dots, its default tile, partial tiles in m and n; and the check can fail:
    the same output is far from the float64 product of the unrounded x."""
    case = matmul_case(t, 150, _k(t), 203, bias=True, seed=60)
    q8 = q8_gemm_case(case)
    err = _err(q8, dev, {"q8": True})
    assert err <= q8.tol, f"{q8.name}: rel. error {err:.3g} > {q8.tol:.3g}"
    got = run_op(q8.op, q8.inputs, {"gemm": {"q8": True}}, in_types=q8.in_types, dev=dev)[0]
    assert rel_error(got, replace(case, inputs=q8.inputs).reference()[0]) > 30 * q8.tol


@pytest.mark.parametrize("tile", range(len(Q8_TILES)))
@pytest.mark.parametrize("t", ["Q4_K", "Q6_K", "Q8_0", "Q5_0"])
def test_q8_every_tile(dev, t, tile):
    """k of 24 blocks of 32 (an odd count of nb = 2 steps) or 7 (Q8_0, Q5_0)."""
    _run(matmul_case(t, 150, _k(t), 203, bias=tile % 2 == 0, seed=70 + tile), dev,
         {"q8": True, "splits": 1, **Q8_TILES[tile]})


@pytest.mark.parametrize("splits", [2, 3, 7])
@pytest.mark.parametrize("t", ["Q4_K", "Q4_0"])
def test_q8_split_k(dev, t, splits):
    """Uneven splits (7 of 2 k = 448 or 1536 leave empty ones), bias added once."""
    tile = Q8_TILES[splits % len(Q8_TILES)]
    _run(matmul_case(t, 70, 2 * _k(t), 131, bias=True, seed=80 + splits), dev, {"q8": True, **tile, "splits": splits})


@pytest.mark.parametrize("gemm", [dict(q8=True, splits=1), dict(q8=True, tm=8, tn=4, nb=2, splits=3)])
def test_q8_epilogues(dev, gemm):
    """Residual, multi-output segments with biases (per type one GEMM after one int8 x pass) and a
    binding split (two row ranges of one int8 x), with and without split-k."""
    _run(matmul_add_case("Q6_K", 65, 1024, 129, bias=True, seed=81), dev, gemm)
    case = q8_gemm_case(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 40, 1024, (70, 130, 67), True, seed=82))
    per_type = 2 + (gemm["splits"] > 1)           # x pass, GEMM (, reduction)
    assert _run_multi_joined(dev, case, (70, 130, 67), {**case.attrs, "gemm": gemm}) == 2 * per_type
    with dev.binding_limit(20000):
        _run(matmul_case("Q8_0", 140, 640, 203, bias=True, seed=83), dev, gemm)


@pytest.mark.parametrize("gemm", [{"q8": True}, dict(q8=True, tm=4, tn=4, nb=2, loaders=0, splits=3)])
def test_q8_rows_past_n_tokens(dev, gemm):
    """A short prompt in a longer plan: rows below n_tokens as the twin has them (the x pass skips the
    rest), row tiles wholly past n_tokens never written (NaN poison kept)."""
    case = q8_gemm_case(matmul_case("Q4_K", 300, 768, 203, bias=True, seed=84))
    n_tokens = 20
    got = run_op(case.op, case.inputs, {"gemm": gemm}, n_tokens=n_tokens, in_types=case.in_types, dev=dev)[0]
    want = case.reference()[0][:n_tokens]
    assert np.abs(want).max() > 1 and rel_error(got[:n_tokens], want) <= case.tol
    bm = 16 * gemm.get("tm", 8)
    assert np.isnan(got[bm:]).all()


def test_q8_choice(dev, monkeypatch):
    """The integer-dot kernel where the adapter has int8 dots and the type has a snippet; f32 otherwise,
    and on request (``q8``: False); asking for it on a type without one is an error."""
    kern = lambda t, over=None, m=128: GemmKernel(dev, m, 512, 70, t, {"QUANT": t.lower(), "HAS_BIAS": False,
                                                                       "HAS_RES": False, "NSEG": 1}, over)
    monkeypatch.setattr(Device, "int8_dots", property(lambda self: False))
    assert not any(kern(t).q8 for t in ("Q4_K", "Q8_0"))
    monkeypatch.setattr(Device, "int8_dots", property(lambda self: True))
    assert all(kern(t).q8 for t in Q8_TYPES) and not kern("F16").q8 and not kern("Q2_K").q8
    assert not kern("Q4_K", {"q8": False}).q8
    assert not kern("Q4_K", m=3).cfg                                 # a few rows: gemm_q.wgsl
    with pytest.raises(DeviceError, match="no integer-dot GEMM"):
        kern("Q2_K", {"q8": True})


MMA_TILES = [dict(tm=4, tn=8), dict(tm=4, tn=4, bk=32), dict(tm=8, tn=8, bk=32), dict(tm=2, tn=4),
             dict(tm=8, tn=8, sn=4), dict(tm=4, tn=16, sn=4, bk=32), dict(tm=4, tn=4, splits=3),
             dict(tm=8, tn=8, sn=4, fm=4), dict(tm=4, tn=8, fm=4, bk=32), dict(tm=8, tn=16, sn=4, fm=4, bk=32),
             dict(tm=16, tn=8, sn=2, fm=4, splits=2, bk=32), dict(tm=8, tn=8, sn=2)]
"""The matrix-unit GEMM's subgroup grids, blocks of 16 x 16 per subgroup and k per step: 2 x 4 of 2 x 2
(64), 2 x 2 (32), 4 x 4 (32), 1 x 2 (64), 4 x 2 of 2 x 4 (64), 2 x 4 of 2 x 4 (32), 2 x 2 split-k 3; with
4 blocks along m: 2 x 2 of 4 x 4 (64), 1 x 4 of 4 x 2 (32), 2 x 4 of 4 x 4 (32), 4 x 4 of 4 x 2 split-k 2
(32); 4 x 4 of 2 x 2 (64: 16 subgroups, taking turns at the 8 result slots)."""


def _needs_mma(dev) -> None:
    if not dev.has_mma:
        pytest.skip("the matrix-unit GEMM needs Dawn's f16 subgroup matrices (the H100 under Dawn)")


MMA_SWEEP = ("Q4_K", "Q6_K", "Q8_0", "Q4_0", "Q5_0", "F16")
"""Types taken through every matrix-unit tile; the others (whose weight units are the same code on other
loaders) through two: 2 x 2 and 4 x 4 blocks per subgroup."""


@pytest.mark.parametrize("t,tile", [(t, i) for t in MMA_TYPES
                                    for i in (range(len(MMA_TILES)) if t in MMA_SWEEP else (0, 7))])
def test_mma_every_type_and_tile(dev, t, tile):
    """gemm_mma.wgsl against its twin (f16 x and weights, f32 sums): partial tiles in m and n, bias or
    not, every subgroup grid."""
    _needs_mma(dev)
    _run(matmul_case(t, 150, _k(t) if t != "F16" else 224, 203, bias=tile % 2 == 0, seed=90 + tile), dev,
         {"mma": True, **MMA_TILES[tile]})


@pytest.mark.parametrize("t", ["Q4_K", "Q6_K"])
@pytest.mark.parametrize("tile", [0, 1, 6, 7, 10])
def test_mma_half_loaders(dev, t, tile):
    """The K-quant loaders that dequantize in f16 arithmetic (gemm_mma/<type>h.wgsl) against their twin
    (ops/gemm.py half_dequant): partial tiles, split-k, 32 and 64 k per step; on the matrix units only."""
    _needs_mma(dev)
    _run(matmul_case(t, 150, _k(t), 203, bias=tile % 2 == 0, seed=140 + tile), dev,
         {"mma": True, "half": True, **MMA_TILES[tile]})


@pytest.mark.parametrize("t,half", [("Q4_K", True), ("Q6_K", True), ("Q4_K", False), ("Q8_0", False),
                                    ("Q5_0", False)])
@pytest.mark.parametrize("tile", [0, 1, 6, 8, 10])
def test_mma_transposed_weights(dev, t, half, tile):
    """Weights staged transposed (TileConfig.wt, [k][n] in workgroup memory, the right matrix loaded
    row-major) for the loaders of 32-weight units: partial tiles, split-k, 32 and 64 k per step, 2 and 4
    blocks along m; against the same twin as the default staging. F16 and the 8-weight loader refuse it."""
    from oxigpu.backends.wgpu.tuning import DeviceTraits
    for wt in ("F16", "Q2_K"):
        with pytest.raises(DeviceError, match="transposed weight staging"):
            gemm_shader(DeviceTraits(has_mma=True), 150, wt, 203, {"mma": True, "wt": True}, _k(wt))
    _needs_mma(dev)
    _run(matmul_case(t, 150, _k(t), 203, bias=tile % 2 == 0, seed=160 + tile), dev,
         {"mma": True, "half": half, "wt": True, **MMA_TILES[tile]})


def _within_block_step(got: np.ndarray, want: np.ndarray) -> bool:
    """Each staged weight (rows of float64) within one f16 step of the largest of its 32: the half-precision
    loaders' bound where a driver splits their multiply-add (test_mma_weight_loaders says why)."""
    big = np.repeat(np.abs(want).reshape(want.shape[0], -1, 32).max(axis=2), 32, axis=1)
    return bool((np.abs(got - want) <= np.spacing(big.astype(np.float16)).astype(np.float64)).all())


@pytest.mark.parametrize("t,wload,wst", [("Q4_K", "q4_kh", 1), ("Q6_K", "q6_kh", 1), ("Q4_K", "q32", 1),
                                         ("Q6_K", "q32", 1), ("Q8_0", "q32", 1), ("Q2_K", "dq8", 1), ("F16", "f16", 1),
                                         ("Q4_K", "q4_kh", 3), ("Q6_K", "q6_kh", 3), ("Q8_0", "q32", 3),
                                         ("Q8_0", "q32r", 1), ("Q5_0", "q32r", 1), ("Q4_0", "q32r", 1),
                                         ("Q5_0", "q32r", 3), ("Q8_0", "q32r16", 1), ("Q5_0", "q32r16", 1),
                                         ("Q4_0", "q32r16", 3)])
def test_mma_weight_loaders(dev, t, wload, wst):
    """The matrix-unit GEMM's weight loaders (gemm_mma/<wload>.wgsl) alone, through gemm_mma_units.wgsl
    (which lavapipe runs: no subgroup matrices needed): each row's staged halves against the twin's weights
    (ops/gemm.py half_dequant for the f16-arithmetic ones, numpy's dequantization rounded to f16 for the
    rest): each weight within one f16 step of its 32-block's largest (lavapipe splits the f16 multiply-add,
    rounding the product where the twin rounds once: ~13 % of Q4_K's weights land a step of the product's
    size away; a wrong element or scale moves one by a sixteenth of the block's range or more), the f32
    loaders equal for all but a few weights (ties). ``wst`` > 1: a row's consecutive k that far apart in
    workgroup memory, as the transposed staging (TileConfig.wt) puts them."""
    from oxigpu.backends.wgpu.device import Dispatch
    from oxigpu.backends.wgpu.ops.gemm import W16_BINDING, half_dequant
    from oxigpu.quant import dequantize, quantize
    if not dev.has_f16:
        pytest.skip("needs shader-f16")
    n, k = 5, 1024
    x = np.random.default_rng(11).standard_normal((n, k)).astype(np.float32) * 0.05
    x[1] += 0.03      # rows whose mins matter
    w = quantize(x, get_type(t)) if t != "F16" else x.astype(np.float16)
    want = half_dequant(w, t) if wload.endswith("h") else \
        dequantize(w, get_type(t)).astype(np.float16).astype(np.float64)
    row_bytes = get_type(t).row_bytes(k)
    pipe = dev.pipeline("gemm_mma_units.wgsl", defines={"KMAX": k, "WST": wst, "WLOAD": wload, "QUANT": t.lower(),
                                                         "HAS_BIAS": False, "HAS_RES": False, "NSEG": 1})
    wbuf = dev.upload(gpu_layout(np.ascontiguousarray(w).view(np.uint8).reshape(-1), t))
    y = dev.upload(np.full((n, k), np.nan, np.float32))
    binds = {1: dev.uniform([k, n, n, 0, row_bytes, 1, 0, 0] + [0] * 8), 3: wbuf, 5: y}
    if wload.endswith("h") or wload == "q32r16":   # 16-byte words; Q4_K's and q32r16's read W only so (as
        w_only = t == "Q4_K" or wload == "q32r16"    # GemmKernel.encode binds them)
        binds[W16_BINDING] = binds.pop(3) if w_only else binds[3]
    dev.submit([Dispatch(pipe, dev.bind_group(pipe, binds), (n, 1, 1))])
    got = dev.read(y, np.float32, (n, k)).astype(np.float64)
    assert _within_block_step(got, want) and np.abs(want).max() > 0.05
    assert wload.endswith("h") or (got != want).mean() < 0.01


@pytest.mark.parametrize("t", ["Q4_K", "Q6_K"])
def test_half_dequant_twin(t):
    """half_dequant (the f16-arithmetic loaders' twin) is the file's weights with f16 sub-block factors and
    one f16 rounding per weight: within 2^-10 of max |w| per row of numpy's f32 dequantization (a wrong
    element, scale or min moves it by far more), and not equal to it (the factors' rounding shows)."""
    from oxigpu.backends.wgpu.ops.gemm import half_dequant
    from oxigpu.quant import dequantize, quantize
    x = np.random.default_rng(5).standard_normal((7, 512)).astype(np.float32)
    w = quantize(x, get_type(t))
    a, b = dequantize(w, get_type(t)).astype(np.float64), half_dequant(w, t)
    assert a.shape == b.shape == x.shape
    err = np.abs(a - b).max(axis=1) / np.abs(a).max(axis=1)
    assert err.max() < 2.0 ** -10 and (a != b.astype(np.float32)).any()


def test_mma_epilogues(dev):
    """Residual, multi-output segments with biases, and a binding split, on the matrix units."""
    _needs_mma(dev)
    _run(matmul_add_case("Q6_K", 65, 1024, 129, bias=True, seed=95), dev, {"mma": True})
    _run(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 40, 1024, (70, 130, 67), True, seed=96), dev, {"mma": True})
    with dev.binding_limit(20000):
        _run(matmul_case("Q8_0", 140, 640, 203, bias=True, seed=97), dev, {"mma": True})


def test_mma_choice(dev, monkeypatch):
    """Where the device has the matrix units, prefill chunks take them by default for F16 weights and for
    the quantized types where ``mma_tile`` expects MMA_Q8_TFLOPS (Qwen2.5-0.5B's 896 columns too): 128 x
    128 tiles unsplit where they fill the GPU, split-k or smaller tiles where those fill more SMs, 64 k per
    step; narrower quantized outputs on request; every type (through its integer-dot loader, its raw-word
    one for Q8_0 / Q5_0 / Q4_0, or its dq8 snippet: Q2_K, BF16; F32 only on request); short chunks and
    devices without them keep their kernels."""
    monkeypatch.setattr(dev, "has_mma", True, raising=False)
    monkeypatch.setitem(dev.limits, "max-compute-workgroup-storage-size", 49152)
    grid = lambda d: (d["SGM"], d["SGN"], d["TNB"], d["BK"], d["SPLITS"], d["WLOAD"])
    shader, defines, cfg = gemm_shader(dev, 512, "F16", 28672, None, 4096)                     # 8B gate+up
    assert shader == "gemm_mma.wgsl" and grid(defines) == (4, 2, 4, 64, 1, "f16")
    from oxigpu.backends.wgpu.tuning import tuning
    q4 = "q4_kh" if "Q4_K" in tuning(dev).gemm.mma_half_types else "q32"    # the class's loader for Q4_K
    assert grid(gemm_shader(dev, 512, "Q4_K", 2048, None, 2048)[1]) == (4, 2, 4, 64, 2, q4)     # 1B o: 64 tiles
    assert grid(gemm_shader(dev, 512, "Q4_K", 896, None, 4864)[1])[4] > 1                        # Qwen down
    assert grid(gemm_shader(dev, 64, "F16", 28672, None, 4096)[1])[:3] == (2, 2, 2)              # 64 rows
    assert gemm_shader(dev, 512, "Q4_K", 128, None, 1024)[0] != "gemm_mma.wgsl"                # 1 column tile
    for t, wload in (("Q5_K", "q32"), ("IQ2_XS", "q32"), ("Q2_K", "dq8"), ("BF16", "dq8")):
        shader, defines, _ = gemm_shader(dev, 512, t, 14336, None, 4096)
        assert shader == "gemm_mma.wgsl" and defines["WLOAD"] == wload, t
    assert gemm_shader(dev, 512, "F32", 14336, None, 4096)[0] != "gemm_mma.wgsl"          # F32: on request
    assert gemm_shader(dev, 512, "F32", 14336, {"mma": True}, 4096)[1]["WLOAD"] == "dq8"
    monkeypatch.setitem(dev.limits, "max-compute-workgroup-storage-size", 32768)   # 32 k per step where 64 won't fit
    assert gemm_shader(dev, 512, "F16", 14336, None, 4096)[1]["BK"] == 32
    shader, defines, _ = gemm_shader(dev, 512, "Q5_0", 896, {"mma": True, "tm": 4, "tn": 4}, 896)
    assert shader == "gemm_mma.wgsl" and (defines["SGN"], defines["WLOAD"]) == (2, "q32r16")   # raw, 16-byte words
    words32 = {"mma": True, "tm": 4, "tn": 4, "raw16": False}
    assert gemm_shader(dev, 512, "Q5_0", 896, words32, 896)[1]["WLOAD"] == "q32r"
    assert gemm_shader(dev, 8, "F16", 4096, None, 4096)[0] == "gemm_q.wgsl"
    with pytest.raises(DeviceError, match="no matrix-unit GEMM for Q5_K"):
        gemm_shader(dev, 512, "Q5_K", 4096, {"mma": True, "bk": 16}, 4096)
    monkeypatch.setattr(dev, "has_mma", False, raising=False)
    assert gemm_shader(dev, 512, "F16", 14336, None, 4096)[0] != "gemm_mma.wgsl"


def test_mma_decode_choice(monkeypatch):
    """Decode batches (mma_min_rows to short_rows rows) on a device with the matrix units take the first
    matching GemmTuning.mma_decode rule (GLU rules for the GLU; splits capped at k / min_split_k), also
    with only ``half`` asked; fewer rows the short GEMM, more the prefill cost model's tile."""
    from oxigpu.backends.wgpu import tuning as tn
    mma = tn.DeviceTraits(has_mma=True)
    rules = (tn.DecodeTile(dict(tm=2, tn=8, sn=4, splits=4), glu=True, m=(17, 32)),
             tn.DecodeTile(dict(tm=4, tn=4, sn=2, splits=2), glu=True),
             tn.DecodeTile(dict(tm=4, tn=4, sn=2, splits=8), n=(0, 8191)),
             tn.DecodeTile(dict(tm=4, tn=8, sn=4, splits=1)))
    monkeypatch.setitem(tn.TUNING, tn.MMA, replace(tn.TUNING[tn.MMA], gemm=replace(tn.TUNING[tn.MMA].gemm,
                                                                                    mma_decode=rules)))
    g = tn.TUNING[tn.MMA].gemm
    shape = lambda c: (c.tm, c.tn, c.sn, c.splits)
    assert shape(gemm_shader(mma, 20, "Q4_K", 28672, None, 4096, glu=True)[2]) == (2, 8, 4, 4)
    assert shape(gemm_shader(mma, 64, "Q4_K", 28672, None, 4096, glu=True)[2]) == (4, 4, 2, 2)
    assert shape(gemm_shader(mma, 64, "Q6_K", 4096, {"half": True}, 14336)[2]) == (4, 4, 2, 8)
    assert shape(gemm_shader(mma, 40, "Q4_K", 4096, None, 1024)[2]) == (4, 4, 2, 1024 // g.min_split_k)
    assert shape(gemm_shader(mma, 40, "Q4_K", 16384, None, 4096)[2]) == (4, 8, 4, 1)
    assert gemm_shader(mma, 8, "Q4_K", 4096, None, 4096)[0] == "gemm_q.wgsl"
    assert gemm_shader(mma, 512, "Q4_K", 28672, None, 4096, glu=True)[2].splits == 1     # prefill: epilogue


def test_mma_over_gemv(dev, monkeypatch):
    """GemmTuning.mma_over_gemv sends matmuls of up to gemv_rows rows of the matching shapes to the
    matrix units with the rule's tile (the others, and devices without the units, keep the GEMV; the test
    device follows the rule where it has them)."""
    from oxigpu.backends.wgpu import tuning as tn
    from oxigpu.backends.wgpu.ops.matmul import gemv_rows
    mma = tn.DeviceTraits(has_mma=True)
    rule = tn.DecodeTile(dict(tm=4, tn=4, sn=2, splits=4), glu=False, m=(9, 16), n=(4096, 4096), k=(14336, 14336))
    monkeypatch.setitem(tn.TUNING, tn.MMA, replace(tn.TUNING[tn.MMA], gemm=replace(tn.TUNING[tn.MMA].gemm,
                                                                                    mma_over_gemv=(rule,))))
    assert not gemv_rows(mma, 16, {}, "Q6_K", 4096, 14336) and gemv_rows(mma, 8, {}, "Q6_K", 4096, 14336)
    assert gemv_rows(mma, 16, {}, "Q6_K", 4096, 4096) and gemv_rows(mma, 16, {}, "Q6_K", 4096, 14336, glu=True)
    assert gemv_rows(mma, 16, {}) and gemv_rows(mma, 1, {}, "Q6_K", 4096, 14336)
    # a plan of one sequence's rows (a speculative verification) keeps the GEMV: its rows sum as one-row steps
    assert gemv_rows(mma, 16, {"one_seq": True}, "Q6_K", 4096, 14336) and not gemv_rows(mma, 17, {"one_seq": True})
    assert gemv_rows(dev, 16, {}, "Q6_K", 4096, 14336) == (not dev.has_mma)   # lavapipe: no matrix units
    shader, _, cfg = gemm_shader(mma, 16, "Q5_K", 4096, None, 14336)     # (Q4_K, Q6_K: gemm_mmv.wgsl)
    assert shader == "gemm_mma.wgsl" and (cfg.tm, cfg.tn, cfg.splits) == (4, 4, 4)
    assert gemm_shader(mma, 16, "Q6_K", 4096, None, 4096)[0] == "gemm_q.wgsl"


def test_mmv_choice(monkeypatch):
    """Decode batches of 9-16 rows of the large Q4_K weights (the mma_over_gemv shapes) take gemm_mmv.wgsl on
    a device with the matrix units, split k until its 128-row workgroups fill half the slots (the GLU's gate
    and up rows counted together), Q6_K too; Q5_K keeps the tiled kernel, 8 rows and one sequence's plans the
    GEMV; ``mmv`` in the gemm attr forces (True) or forbids (False) it; x is rounded in the kernel (no x pass)
    but where a norm prologue needs gemm_xh.wgsl."""
    from oxigpu.backends.wgpu import tuning as tn
    from oxigpu.backends.wgpu.ops.gemm import mmv_splits
    from oxigpu.backends.wgpu.ops.matmul import gemv_rows
    mma = tn.DeviceTraits(has_mma=True)
    for n, k, glu, splits in ((28672, 4096, True, 1), (4096, 4096, False, 4), (4096, 14336, False, 4),
                              (65536, 4096, False, 1), (4096, 4096, True, 4)):
        assert not gemv_rows(mma, 16, {}, "Q4_K", n, k, glu)
        shader, defs, cfg = gemm_shader(mma, 16, "Q4_K", n, None, k, glu=glu)
        assert shader == "gemm_mmv.wgsl" and cfg.mmv and cfg.half and cfg.tile == (16, 128)
        assert cfg.splits == defs["SPLITS"] == splits == mmv_splits(n, k, tn.MMA)
    assert gemm_shader(mma, 16, "Q6_K", 4096, None, 14336)[1]["WLOAD"] == "q6_k"
    assert gemm_shader(mma, 16, "Q5_K", 4096, None, 14336)[0] == "gemm_mma.wgsl"
    # a vocabulary's LM head of any row length (the 1B's: k 2048)
    assert not gemv_rows(mma, 16, {}, "Q6_K", 128256, 2048) and gemv_rows(mma, 16, {}, "Q6_K", 32768, 2048)
    assert gemm_shader(mma, 12, "Q6_K", 128256, None, 2048)[0] == "gemm_mmv.wgsl"
    assert gemv_rows(mma, 8, {}, "Q6_K", 128256, 2048) and gemv_rows(mma, 16, {}, "Q8_0", 128256, 2048)
    assert gemv_rows(mma, 8, {}, "Q4_K", 4096, 4096) and gemv_rows(mma, 16, {"one_seq": True}, "Q4_K", 4096, 4096)
    assert gemm_shader(mma, 3, "Q4_K", 130, {"mmv": True, "mmv_splits": 3}, 1024)[2].splits == 3
    assert gemm_shader(mma, 16, "Q4_K", 4096, {"mmv": False}, 4096)[0] != "gemm_mmv.wgsl"
    assert mmv_splits(4096, 512, tn.MMA) == 2      # each split at least two 128-k steps
    assert gemm_shader(tn.DeviceTraits(), 16, "Q4_K", 4096, {"mmv": True}, 4096)[0] != "gemm_mmv.wgsl"


@pytest.mark.parametrize("t", ["Q4_K", "Q6_K"])
def test_mmv_loader(dev, t):
    """gemm_mmv.wgsl's weight loader (gemm_mmv/<type>.wgsl) through gemm_mmv_stage.wgsl, which runs it without
    the matrix units: every step's staged halves of 40 rows (a partial row block; Q6_K's blocks in the GPU's
    pairs, both kinds) against ops/gemm.py half_dequant's in the k0 k2 k1 k3 order, each within one f16 step
    of its 32 weights' largest (test_mma_weight_loaders' bound: lavapipe splits the f16 multiply-add), on
    random blocks of normal and tiny scales (huge ones overflow f16, as on every half-precision loader)."""
    from oxigpu.backends.wgpu.device import Dispatch
    from oxigpu.quant.samples import random_blocks
    qt = get_type(t)
    n, k = 40, 768
    rng = np.random.default_rng(5)
    raw = np.concatenate([random_blocks(qt, n // 2, k, rng, "normal"), random_blocks(qt, n // 2, k, rng, "tiny")])
    want = half_dequant(raw, t).astype(np.float16)
    pipe = dev.pipeline("gemm_mmv_stage.wgsl", defines={"HAS_BIAS": False, "HAS_RES": False, "NSEG": 1,
                                                         "WLOAD": t.lower()})
    dims = dev.uniform([k, n, n, 0, raw.shape[1], 16, 0, 0, n, 0, 0, 0, 0, 0, 0, 0])
    out = dev.upload(np.zeros((n, k), np.float16))
    w = dev.upload(gpu_layout(np.ascontiguousarray(raw).reshape(-1), t))
    bg = dev.bind_group(pipe, {1: dims, 12 if t == "Q4_K" else 3: w, 9: out})
    dev.submit([Dispatch(pipe, bg, (-(-n // 16), k // 128, 1))])
    got = dev.read(out, np.float16, (n, k)).reshape(n, k // 4, 4)[:, :, [0, 2, 1, 3]].reshape(n, k)
    got, want = got.astype(np.float64), want.astype(np.float64)
    assert _within_block_step(got, want)
    assert (got == want).mean() > 0.8 and np.abs(want).max() > 0.05


def test_mmv_x_f32(dev):
    """gemm_mmv.wgsl's x rounded from f32 as it is staged (gemm_mmv/x_f32.wgsl, through gemm_mmv_xstage.wgsl
    on any adapter): every step's 16 x 128 halves equal numpy's f16 of x in the k0 k2 k1 k3 order, the rows
    past n_tokens zeros (gemm_xh.wgsl's PERM4 words, which it replaces without a norm)."""
    from oxigpu.backends.wgpu.device import Dispatch
    k, live = 768, 13
    x = (np.random.default_rng(9).standard_normal((16, k)) * 40.0).astype(np.float32)
    pipe = dev.pipeline("gemm_mmv_xstage.wgsl", defines={"HAS_BIAS": False, "HAS_RES": False, "NSEG": 1})
    dims = dev.uniform([k, 16, 16, 0, 0, 16, 0, 0, 16, 0, 0, 0, 0, 0, 0, 0])
    out = dev.upload(np.full((16, k), np.nan, np.float16))
    dev.write_params(Params(pos=0, n_tokens=live))
    binds = {0: dev.params_buffer, 1: dims, 2: dev.upload(x), 9: out}
    dev.submit([Dispatch(pipe, dev.bind_group(pipe, binds), (k // 128, 1, 1))])
    got = dev.read(out, np.float16, (16, k))
    want = x.astype(np.float16).reshape(16, k // 4, 4)[:, :, [0, 2, 1, 3]].reshape(16, k)
    want[live:] = 0
    assert np.array_equal(got.view(np.uint16), want.view(np.uint16))


def test_mmv_checks(dev):
    """The "matmul_mmv" kernel checks (``oxigpu kernels --filter matmul_mmv``) on a device with the units."""
    from oxigpu.backends.wgpu.kernel import CHECKS, case_error, load_kernels, run_case
    _needs_mma(dev)
    load_kernels()
    cases = CHECKS["matmul_mmv"]()
    assert len(cases) == 6
    for case in cases:
        err, tol = case_error(case, run_case(case, dev), case.reference())
        assert err <= tol, case.name


@pytest.mark.parametrize("gemm", [{"mmv": True}, {"mmv": True, "mmv_splits": 3}])
def test_mmv_multi_segments(dev, gemm):
    """matmul_multi on gemm_mmv.wgsl with its weights joined as the backend joins them: the two Q4_K weights as
    one kernel whose output columns fall into two segments, the Q6_K one alone, biases; split-k (the default
    split of these narrow outputs, or 3), summed by each column's last workgroup, which stores the segments:
    one dispatch a kernel (x rounded in it)."""
    _needs_mma(dev)
    case = mma_gemm_case(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 16, 1024, (70, 130, 67), True, seed=84),
                         ["Q4_K", "Q6_K"])
    assert _run_multi_joined(dev, case, (70, 130, 67), {**case.attrs, "gemm": gemm}) == 2


@pytest.mark.parametrize("m,n,norm,splits", [(16, 136, True, 0), (11, 260, False, 3), (13, 200, False, 1),
                                              (16, 72, True, 1)])
def test_mmv_glu(dev, m, n, norm, splits):
    """matmul_glu on gemm_mmv.wgsl (joined gate and up rows, as the backend joins them): a workgroup's gate
    subgroups and up subgroups on the same outputs, act(gate) * up stored by it (unsplit) or by each column's
    last workgroup over the splits' partial sums; against the f16-product twin, output columns past its
    64-output workgroups, the last rows past n_tokens, the norm prologue in the x pass."""
    _needs_mma(dev)
    _glu_joined(dev, "Q4_K", "silu", m, 1024, n, norm, {"mmv": True, **({"mmv_splits": splits} if splits else {})})


@pytest.mark.parametrize("t,act,m,k,n,norm", [("F16", "silu", 150, 224, 203, False),
                                              ("Q4_K", "gelu_tanh", 70, 512, 96, False),
                                              ("Q8_0", "silu", 40, 640, 33, False),
                                              ("Q6_K", "silu", 300, 256, 300, False),
                                              ("Q4_K", "silu", 90, 512, 130, True),
                                              ("F16", "gelu_tanh", 64, 256, 64, True)])
def test_glu_joined(dev, t, act, m, k, n, norm):
    """matmul_glu of m rows with gate and up back to back in one buffer (as WgpuBackend joins them): on the
    matrix units one GEMM whose epilogue pairs each subgroup's gate and up blocks (and the x pass), against
    its twin; elsewhere two GEMMs and the glu kernel, against float64 (or the integer-dot twin). Partial
    tiles in m and n; the last rows past n_tokens. With ``norm``, the RMS norm in the prologue."""
    _glu_joined(dev, t, act, m, k, n, norm)


def _glu_joined(dev, t: str, act: str, m: int, k: int, n: int, norm: bool, gemm: dict | None = None) -> None:
    case = matmul_glu_case(t, k, n, act, norm, seed=7, m=m)
    if gemm is not None:
        case = replace(case, attrs={**case.attrs, "gemm": gemm})
    x, wg, wu, *nw = case.inputs
    mma = glu_gemm(dev, m, t, 2 * n, k, gemm)
    if mma:
        case = mma_gemm_case(case, [t] if gemm_shader(dev, m, t, 2 * n, gemm, k, glu=True)[2].half else [])
    elif _uses(case, dev, None, "q8"):
        case = q8_gemm_case(case)
    wbuf = dev.upload(gpu_layout(np.concatenate([wg.reshape(-1), wu.reshape(-1)]), t))
    y = dev.upload(np.full((m, n), np.nan, np.float32))
    kern = MatmulGluKernel(dev, case.attrs, [(m, k), (n, k), (n, k), *(w.shape for w in nw)], case.in_types,
                           [(m, n)])
    ds = kern.encode([dev.upload(case.inputs[0]), (wbuf, 0, wg.nbytes), (wbuf, wg.nbytes, wu.nbytes),
                      *map(dev.upload, nw), y])
    if mma:     # the x pass and the GEMM (split-k: and the reduction, which pairs gate and up); gemm_mmv.wgsl
        # one dispatch (the x pass only for the norm)
        cfg = gemm_shader(dev, m, t, 2 * n, gemm, k, glu=True)[2]
        assert len(ds) == (1 + norm if cfg.mmv else 2 + (cfg.splits > 1))
    live = m - 3                                          # the last rows are padding: never written
    dev.write_params(Params(pos=0, n_tokens=live))
    for reps in (1, 2):     # replays in one submit (gemm_mmv.wgsl's split counters leave themselves zeroed)
        dev.write(y, np.full((m, n), np.nan, np.float32))
        dev.submit(ds * reps)
        got = dev.read(y, np.float32, (m, n))
        assert rel_error(got[:live], case.reference()[0][:live]) <= case.tol


@pytest.mark.parametrize("t,act,m,k,n,norm,gemm", [
    ("Q4_K", "silu", 40, 1024, 130, True, {"mma": True, "tm": 4, "tn": 4, "sn": 2, "splits": 3}),
    ("Q6_K", "gelu_tanh", 64, 768, 96, False, {"mma": True, "tm": 2, "tn": 8, "sn": 4, "splits": 2}),
    ("F16", "silu", 17, 512, 200, False, {"mma": True, "tm": 4, "tn": 8, "sn": 4, "splits": 4}),
    ("Q4_K", "silu", 33, 2048, 300, True, None),       # a decode batch's default tile and split
    ("Q8_0", "silu", 64, 1024, 64, False, None)])
def test_mma_glu_split_k(dev, t, act, m, k, n, norm, gemm):
    """matmul_glu split-k on the matrix units: the tiles run over the gate and up rows as a plain GEMM's,
    the reduction pass adds the partial sums and pairs act(gate) * up; against the twin, partial tiles,
    the last rows past n_tokens."""
    _needs_mma(dev)
    _glu_joined(dev, t, act, m, k, n, norm, gemm)


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_glu_reduce_pass(dev, act):
    """gemm_reduce.wgsl under GLU alone (lavapipe runs it; the matrix-unit GEMM that feeds it runs only
    where subgroup matrices are): partial sums [splits][m][2n] of n gate then n up columns, added in
    order and paired as act(gate) * up, against float64; rows past n_tokens untouched."""
    from oxigpu.backends.wgpu.device import PARAMS_BINDING, Dispatch
    from oxigpu.backends.wgpu.ops.matmul import glu64
    splits, m, n, live = 3, 5, 300, 3
    ps = np.random.default_rng(3).standard_normal((splits, m, 2 * n)).astype(np.float32)
    pipe = dev.pipeline("gemm_reduce.wgsl", defines={"HAS_BIAS": False, "HAS_RES": False, "NSEG": 1,
                                                      "SPLITS": splits, "GLU": True, "ACT": act})
    dims = dev.uniform([64, n, 2 * n, 0, 128, m, 0, 0, n, 0, 0, 0, 0, 0, 0, 0])
    y = dev.upload(np.full((m, n), np.nan, np.float32))
    ps_buf = dev.upload(ps)     # bias and residual are not read: any buffer but y
    bg = dev.bind_group(pipe, {PARAMS_BINDING: dev.params_buffer, 1: dims, 4: ps_buf, 5: y, 7: ps_buf, 6: ps_buf})
    dev.write_params(Params(pos=0, n_tokens=live))
    dev.submit([Dispatch(pipe, bg, (-(-n // 256), m, 1))])
    got = dev.read(y, np.float32, (m, n))
    sums = ps.astype(np.float64).sum(axis=0)
    want = glu64(sums[:, :n], sums[:, n:], act)
    assert rel_error(got[:live], want[:live]) <= 1e-6 and np.isnan(got[live:]).all()


@pytest.mark.parametrize("t", ["Q4_K", "F16", "Q8_0"])
def test_norm_prologue(dev, t):
    """matmul_multi of prefill rows with the RMS norm in its prologue, weights uploaded apart: on the matrix
    units the x pass normalizes each row (against the twin rounding x after the norm), elsewhere the
    rms_norm kernel runs first (float64). The integer-dot GEMM is kept out: after the norm its int8 x may
    meet a rounding tie q8_tie_free did not remove."""
    case = matmul_multi_case((t, t), 70, _k(t) if t != "F16" else 224, (150, 40), True, seed=31, norm=True)
    _run(case, dev, {"mma": True} if dev.has_mma else {"q8": False})


def test_mma_x_pass(dev):
    """gemm_xh.wgsl, the matrix-unit GEMM's x pass (GemmKernel.x_pass's grid): each row of x rounded to
    f16 (to nearest even, as numpy rounds), 8 halves per vec4 in row order; rows at or past n_tokens left
    as they were. Dawn only (naga takes no bitcast of vec2<f16>), so where the matrix units are."""
    _needs_mma(dev)
    m, k, n_tokens = 5, 200, 4
    x = (np.random.default_rng(7).standard_normal((m, k)) * 3).astype(np.float32)
    x[0, :4] = [65504.0, 1e-7, -2.0 ** -24, 0.1]       # the f16 maximum, subnormals, an inexact value
    kern = GemmKernel(dev, m, k, 64, "F16", {"QUANT": "f16", "HAS_BIAS": False, "HAS_RES": False, "NSEG": 1},
                      {"mma": True})
    dims = dev.uniform([k, 1, 1, 0, 2 * k, m, 0, 0] + [0] * 8)
    ds, xb = kern.x_pass(dims, dev.upload(x))
    out = xb[6][0]
    dev.queue.write_buffer(out, 0, np.full(m * k, np.nan, np.float16).tobytes())
    dev.write_params(Params(pos=0, n_tokens=n_tokens))
    dev.submit(ds)
    got = dev.read(out, np.float16, (m, k))
    assert np.array_equal(got[:n_tokens], x[:n_tokens].astype(np.float16)) and np.isnan(got[n_tokens:]).all()


def test_mma_twin_is_not_the_float_reference():
    """The twin rounds x and the weights to f16: it differs from float64 by more than the f32 bound (so
    the matrix-unit runs are held to what they compute), and by far less than the rounding allows."""
    case = matmul_case("Q4_K", 64, 768, 70, bias=False, seed=98)
    a, b = case.reference()[0], mma_gemm_case(case).reference()[0]
    assert case.tol < rel_error(b, a) < 1e-2
