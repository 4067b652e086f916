"""Quantized GEMV / GEMM kernels vs a float64 ``x @ dequantize(W).T`` (+ bias).

Tolerance: max |err| / max |ref| <= 2e-7 * sqrt(k) (f32 accumulation over k products; the check
cases in ``ops/matmul.py`` use the same bound). Inputs are random and non-zero, outputs NaN-poisoned.
"""
from __future__ import annotations

from dataclasses import replace

import numpy as np
import pytest
from gpu_helpers import without_subgroups

from oxigpu.backends.wgpu.device import Device, Params
from oxigpu.backends.wgpu.kernel import rel_error, run_op
from oxigpu.backends.wgpu.layout import gpu_layout
from oxigpu.backends.wgpu.ops.gemm import TILED_MIN_ROWS
from oxigpu.backends.wgpu.ops.matmul import (
    GEMV_PIECES,
    NORM_EPS,
    PIECE_TYPES,
    Q8X_PIECES,
    TYPES,
    MatmulGluKernel,
    MatmulMultiKernel,
    computed_case,
    gemv_config,
    gemv_tsum_code,
    matmul_add_case,
    matmul_case,
    matmul_glu_case,
    matmul_glu_checks,
    matmul_multi_case,
    norm_input,
    q8x_case,
    q8x_round,
    split_rows,
)
from oxigpu.errors import DeviceError, InvalidParameterError
from oxigpu.quant import dequantize, get_type, quantize

pytestmark = pytest.mark.gpu


def _run(case, dev, attrs=None):
    attrs = {**case.attrs, **(attrs or {})}
    got = run_op(case.op, case.inputs, attrs, in_types=case.in_types, dev=dev)
    case = computed_case(dev, case, attrs)     # the matrix-unit GEMM of short chunks: its f16 twin
    err = rel_error(got[0], case.reference()[0])
    assert err <= case.tol, f"{case.name}: rel. error {err:.3g} > {case.tol:.3g}"


def _cols(t: str, i: int) -> int:
    """Inner sizes that are block multiples but not tile multiples: 640, 896, 2080 (256-blocks: x8)."""
    return (640, 896, 2080)[i] if get_type(t).block_size <= 32 else (768, 1280, 2304)[i]


@pytest.mark.parametrize("t", TYPES)
@pytest.mark.parametrize("m,shape", [(1, 0), (3, 1), (17, 2)])
def test_matmul_every_type(dev, t, m, shape):
    n = (67, 130, 33)[shape]
    _run(matmul_case(t, m, _cols(t, shape), n, bias=shape != 0, seed=shape), dev)


@pytest.mark.parametrize("t", ["Q4_K", "Q8_0", "F16"])
def test_gemv_without_subgroups(dev, t, monkeypatch):
    """The workgroup-memory reduction used where the adapter has no subgroups."""
    without_subgroups(monkeypatch)
    _run(matmul_case(t, 1, _cols(t, 1), 130, bias=True, seed=7), dev)


# The register-tiled prefill GEMM (m >= TILED_MIN_ROWS; gemm_tiled.wgsl, pinned: on a GPU with int8 dots
# or matrix units the default is gemm_q8.wgsl or gemm_mma.wgsl, tested against their twins in
# test_kernel_gemm.py): partial 64x128 tiles in both dimensions, k not a multiple of its 32-element step
# (F32/F16 at k = 200); F16 weights in f16 tiles and (forced) in f32.
TILED = {"gemm": {"q8": False, "mma": False}}


@pytest.mark.parametrize("t", TYPES)
def test_tiled_gemm_every_type(dev, t):
    _run(matmul_case(t, 70, _cols(t, 1), 130, bias=True, seed=60), dev, TILED)


@pytest.mark.parametrize("t,k", [("F16", 200), ("F32", 200)])
def test_tiled_gemm_f32_tiles(dev, t, k, monkeypatch):
    _run(matmul_case(t, TILED_MIN_ROWS, k, 67, bias=False, seed=61), dev, TILED)
    monkeypatch.setattr(Device, "has_f16", property(lambda self: False))
    _run(matmul_case(t, TILED_MIN_ROWS, k, 67, bias=False, seed=61), dev, TILED)


def test_tiled_gemm_epilogues(dev):
    """Residual and multi-output stores, and a binding split, through the tiled kernel."""
    _run(matmul_add_case("Q6_K", 65, 1024, 129, bias=True, seed=62), dev, TILED)
    _run(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 40, 1024, (70, 130, 67), True, seed=63), dev, TILED)
    with dev.binding_limit(20000):
        _run(matmul_case("Q8_0", 64, 640, 203, bias=True, seed=64), dev, TILED)


# GEMV splits: lanes per group (TPR), rows per group (R), groups per workgroup (GPW), pieces per
# 32-block, the exponent-bit conversion off, and the generic dq8 pieces for the specialized types.
_GEMV_VARIANTS = [dict(tpr=32, r=1, gpw=4), dict(tpr=64, r=4, gpw=1), dict(tpr=256, r=2, gpw=1),
                  dict(tpr=128, r=8, gpw=2), dict(tpr=32, r=8, gpw=2, magic=False),
                  dict(tpr=32, r=2, gpw=1, ppb32=2), dict(tpr=64, r=2, gpw=2, ppb32=4), dict(piece="dq8")]


@pytest.mark.parametrize("t", sorted(GEMV_PIECES))
@pytest.mark.parametrize("v", range(len(_GEMV_VARIANTS)))
def test_gemv_variants(dev, t, v):
    """Odd block counts per row (2-aligned rows for Q8_0/Q5_0/Q4_0/Q6_K), rows not multiples of R*GPW."""
    k = _cols(t, 2)
    _run(matmul_case(t, 1, k, 37, bias=v % 2 == 1, seed=40 + v), dev, {"gemv": _GEMV_VARIANTS[v]})


# Piece layouts (shaders/gemv/<piece>.wgsl, PIECE_TYPES) under other splits and two pieces per loop step
# (u2, with an odd number of steps), plain and with the norm prologue.
_PIECE_VARIANTS = [("Q4_K", "q4_k2"), ("Q4_K", "q4_k"), ("Q6_K", "q6_k"), ("Q5_0", "q5_0"), ("Q8_0", "q8_0"),
                   ("F16", "f16"), ("IQ4_XS", "iq4_xs")]


@pytest.mark.parametrize("t,piece", _PIECE_VARIANTS)
@pytest.mark.parametrize("v", [dict(tpr=32, r=4, gpw=4), dict(tpr=64, r=2, gpw=1, u2=True),
                               dict(tpr=16, r=8, gpw=2, magic=False, u2=True), dict(tpr=128, r=1, gpw=2),
                               dict(tpr=32, r=2, gpw=4, u2=True)])
def test_gemv_pieces(dev, t, piece, v):
    k = _cols(t, 2)
    _run(matmul_case(t, 1, k, 37, bias=True, seed=45), dev, {"gemv": {**v, "piece": piece}})
    case = matmul_multi_case((t, t), 1, k, (37, 29), False, seed=46, norm=True)
    _run(case, dev, {**case.attrs, "gemv": {**v, "piece": piece}})


# The integer-dot GEMV (q8x): x quantized to int8 per piece. Against its numpy twin (ops/matmul.py
# q8x_round: the same int8 x, float64 products) the f32 tolerance holds; against the exact float
# reference the error is that of 8-bit activations (~1e-2 of the largest output on random data).
# xq: x quantized by its own dispatch before the GEMV; xs: once per workgroup into workgroup memory.
_Q8X_SPLITS = [dict(tpr=32, r=8, gpw=4, ppb32=2), dict(tpr=64, r=4, gpw=2, u2=True, ppb32=1),
               dict(tpr=64, r=1, gpw=2, ppb32=4), dict(tpr=16, r=2, gpw=4, u2=True, ppb32=2),
               dict(tpr=32, r=2, gpw=4, ppb32=2, xq=True), dict(tpr=64, r=1, gpw=2, u2=True, ppb32=1, xq=True),
               dict(tpr=16, r=2, gpw=8, ppb32=2, xs=True),    # qwen's gate+up (Q8_0, Q4_0, Q5_0)
               dict(tpr=16, r=4, gpw=16, ppb32=2, xs=True),   # the 8B's Q4_0 gate+up
               dict(tpr=32, r=4, gpw=8, ppb32=2, xs=True),    # the 8B's Q8_0 gate+up
               dict(tpr=32, r=2, gpw=2, ppb32=2, xs=True, persist=3),   # 3 workgroups taking 10 in turn
               dict(tpr=32, r=8, gpw=4, ppb32=2, xs=True, persist=2)]   # the 8B's Q4_K gate+up split


@pytest.mark.parametrize("piece,v", [(p, v) for p in sorted(Q8X_PIECES) for v in range(len(_Q8X_SPLITS))
                                     if p != "q32" or v in (0, 1, 4, 6, 9)])
def test_gemv_q8x(dev, piece, v):
    t = PIECE_TYPES.get(piece, "IQ4_XS")      # q32 (generic: any type with an integer-dot loader) on five splits
    attrs = {"gemv": {**_Q8X_SPLITS[v], "piece": piece, "q8x": True}}
    case = matmul_case(t, 1, _cols(t, 2), 37, bias=True, seed=120 + v)
    _run(q8x_case(case, [piece], _Q8X_SPLITS[v]["ppb32"]), dev, attrs)
    assert rel_error(run_op(case.op, case.inputs, attrs, in_types=case.in_types, dev=dev)[0],
                     case.reference()[0]) < 2e-2      # 8-bit x: near the float result, not equal to it
    _run(q8x_case(matmul_add_case(t, 1, _cols(t, 1), 67, bias=True, seed=130 + v), [piece],
                   _Q8X_SPLITS[v]["ppb32"]), dev, attrs)


@pytest.mark.parametrize("v", range(len(_Q8X_SPLITS)))
def test_gemv_q8x_fused(dev, v):
    """Mixed q/k/v (Q4_K + Q6_K in one dispatch, each slot its own x pieces; refused with persist, which
    takes one weight type) and gate+up with the norm."""
    gv = {**_Q8X_SPLITS[v], "q8x": True}
    case = matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 1, 1024, (130, 67, 37), True, seed=140 + v, norm=True)
    qkv = (dev, q8x_case(case, ["q4_k"] * 2 + ["q6_k"]), (130, 67, 37), {**case.attrs, "gemv": {**gv, "piece": "q4_k"}})
    if gv.get("persist"):
        with pytest.raises(DeviceError, match="unsupported GEMV split"):
            _run_multi_joined(*qkv)
    else:
        assert _run_multi_joined(*qkv) == 1 + gv.get("xq", False)
    glu = matmul_glu_checks()[2]                      # Q4_K, silu, norm prologue
    _run(q8x_case(glu, ["q4_k"] * 2), dev, {**glu.attrs, "gemv": {**gv, "piece": "q4_k"}})


@pytest.mark.parametrize("t,piece,ppb32", [("Q4_K", "q4_k", 2), ("Q4_K", "q4_k2", 2), ("Q6_K", "q6_k", 2),
                                          ("Q8_0", "q8_0", 1), ("Q4_0", "q4_0", 2), ("Q5_0", "q5_0", 4),
                                          ("IQ4_XS", "iq4_xs", 2)])
def test_gemv_xq_is_the_in_kernel_quantization(dev, t, piece, ppb32):
    """x quantized by its own dispatch (xq), or once per workgroup into workgroup memory (xs, also with
    fewer workgroups taking the rows in turn: persist), gives the GEMV the int8 pieces, scales and x^2 sums
    it makes for itself in every group: the outputs are equal bit for bit (joined gate+up with the norm, and
    a mixed q/k/v)."""
    k = _cols(t, 1)
    g, u = matmul_case(t, 1, k, 45, False, seed=150), matmul_case(t, 1, k, 45, False, seed=151)
    x, nw, _ = norm_input(g.inputs[0], 152)
    wg, wu = g.inputs[1], u.inputs[1]
    wbuf = dev.upload(gpu_layout(np.concatenate([wg.reshape(-1), wu.reshape(-1)]), t))
    got, n_disp = [], []
    modes = ({}, {"xq": True}, {"xs": True}, {"xs": True, "persist": 2})    # 2 workgroups take 12 in turn
    for mode in modes:
        kern = MatmulGluKernel(dev, {"act": "silu", "norm_eps": NORM_EPS, "gemv": dict(
            tpr=32, r=2, gpw=4, q8x=True, piece=piece, ppb32=ppb32, **mode)}, [x.shape, wg.shape, wu.shape, nw.shape],
            ["f32", t, t, "f32"], [(1, 45)])
        y = dev.upload(np.full(45, np.nan, np.float32))
        ds = kern.encode([dev.upload(x), (wbuf, 0, wg.nbytes), (wbuf, wg.nbytes, wu.nbytes), dev.upload(nw), y])
        dev.write_params(Params(pos=0, n_tokens=1))
        dev.submit(ds)
        got.append(dev.read(y, np.float32, (1, 45)))
        n_disp.append(len(ds))
    assert n_disp == [1, 2, 1, 1] and np.isfinite(got[0]).all() and np.abs(got[0]).max() > 0
    assert all(np.array_equal(got[0], other) for other in got[1:])
    case = q8x_case(matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 1, 1024, (70, 33, 37), True, seed=153, norm=True),
                    ["q4_k"] * 2 + ["q6_k"])
    outs: list[list[np.ndarray]] = [[], [], []]
    for i, mode in enumerate(modes[:3]):        # persist takes one weight type: this q/k/v has two
        gv = {"tpr": 64, "r": 1, "gpw": 2, "q8x": True, "piece": "q4_k", **mode}
        assert _run_multi_joined(dev, case, (70, 33, 37), {**case.attrs, "gemv": gv}, outs[i]) == 1 + (i == 1)
    assert all(np.array_equal(a, b) and np.array_equal(a, c) for a, b, c in zip(*outs))


def test_gemv_q8x_choice(dev, monkeypatch):
    """q8x is chosen only where integer dots are allowed (Device.int8_dots) and every slot's piece has
    them; asked for elsewhere, it is refused."""
    assert all(gemv_config(t, 4096, n).q8x for t in ("Q4_K", "Q6_K", "Q8_0", "Q5_0") for n in (4096, 128256))
    assert not gemv_config("Q4_K", 896, 1152).q8x and not gemv_config("Q2_K", 4096, 4096).q8x
    # types without a piece file of their own: integer dots through the generic q32 piece, float ones dq8
    assert all((c.piece, c.q8x) == ("q32", True) for c in (gemv_config(t, 4096, 4096) for t in ("Q3_K", "IQ2_S")))
    assert (gemv_config("Q5_K", 4096, 4096).piece, gemv_config("Q5_K", 4096, 4096).q8x) == ("q5_k", True)
    assert (gemv_config("IQ4_XS", 4096, 4096).piece, gemv_config("IQ4_XS", 4096, 28672).xs) == ("iq4_xs", True)
    assert gemv_config("Q3_K", 4096, 4096, int8=False).piece == "dq8"
    assert not gemv_config("Q5_0", 896, 2304).q8x and gemv_config("Q8_0", 896, 151936).q8x   # short rows
    assert not any(gemv_config(t, 4096, 28672, int8=False).q8x for t in ("Q4_K", "Q6_K", "Q8_0"))
    # x quantized once: by its own dispatch on the 8B's Q8_0/Q4_0 ffn_down and the Q8_0 LM heads; per
    # workgroup (xs) on the 8B's Q4_K gate+up (with persist) and the other nodes of >= 2048 rows of >= 2048
    # elements; not on gemma3's 640-row ffn_down (float dots), nor on the Q6_K LM heads
    glu = gemv_config("Q4_K", 4096, 28672)
    assert glu.xs and glu.persist and all(gemv_config(t, 4096, 28672).xs for t in ("Q8_0", "Q4_0"))
    assert all(gemv_config(t, 14336, 4096).xq for t in ("Q8_0", "Q4_0")) and gemv_config("Q8_0", 896, 151936).xq
    assert all(gemv_config(t, k, n).xs for t in ("Q4_K", "Q8_0", "Q4_0") for k, n in ((4096, 6144), (4096, 4096),
                                                                                       (2048, 3072), (2048, 2048),
                                                                                       (2048, 16384)))
    assert gemv_config("Q6_K", 14336, 4096).xs and gemv_config("Q4_K", 14336, 4096).xs
    assert all(gemv_config(t, 896, 9728).xs for t in ("Q8_0", "Q4_0", "Q5_0"))    # qwen's gate+up
    cfgs = [gemv_config(t, k, n) for t, k, n in (("Q6_K", 2048, 640), ("Q6_K", 4096, 128256), ("Q4_K", 896, 1152))]
    assert not any(c.xq or c.xs for c in cfgs) and not cfgs[0].q8x
    with pytest.raises(DeviceError, match="unsupported GEMV split"):
        _run(matmul_case("Q3_K", 1, 512, 37, bias=False), dev, {"gemv": {"q8x": True}})
    # a Q4_K slot 0 big enough for q8x with an F16 slot 1 (float pieces only): float dots for both
    monkeypatch.setattr(Device, "int8_dots", property(lambda self: True))
    case = matmul_multi_case(("Q4_K", "F16"), 1, 1024, (3200, 67), False, seed=150)
    assert _run_multi_joined(dev, case, (3200, 67)) == 1


def test_f16_gemv_clamped_x(dev):
    """F16 rows of >= 2048 elements take 128-lane workgroups of two rows with x's index clamped (gemv_config's
    F16 rules; 64 lanes on 4 rows for many rows of < 8192, 256 on 2 for the widest), as plain, norm-prologue
    multi (three weights joined) and GLU nodes; shorter rows keep the old split."""
    cfg = gemv_config("F16", 2048, 130)
    assert cfg.xclamp and (cfg.tpr, cfg.r, cfg.gpw) == (128, 2, 1)
    assert (gemv_config("F16", 4096, 6144).tpr, gemv_config("F16", 14336, 4096).tpr) == (64, 256)   # the 8B's
    assert (gemv_config("F16", 4096, 28672).r, gemv_config("F16", 2048, 16384).tpr) == (4, 64)
    assert not gemv_config("F16", 896, 130).xclamp and not gemv_config("Q4_K", 4096, 4096).xclamp
    _run(matmul_add_case("F16", 1, 2048, 67, bias=True, seed=160), dev)
    case = matmul_multi_case(("F16",) * 3, 1, 2048, (130, 33, 33), False, seed=161, norm=True)
    assert _run_multi_joined(dev, case, (130, 33, 33)) == 1
    _run(matmul_glu_case("F16", 2304, 67, "silu", True, seed=162), dev)
    # the 256-lane split gemv_config gives the 8B's rows, at short odd shapes (lanes past a row's end)
    wide = {"gemv": {"tpr": 256, "r": 2, "gpw": 1, "xclamp": True}}
    _run(matmul_add_case("F16", 1, 2080, 67, bias=True, seed=163), dev, wide)
    glu = matmul_glu_case("F16", 2304, 37, "silu", True, seed=164)
    _run(glu, dev, {**glu.attrs, **wide})
    # the 64-lane, 4-row split of many rows (rows past the last group's, lanes past a row's end)
    four = {"gemv": {"tpr": 64, "r": 4, "gpw": 2, "xclamp": True}}
    glu = matmul_glu_case("F16", 2112, 37, "silu", True, seed=165)
    _run(glu, dev, {**glu.attrs, **four})
    case = matmul_multi_case(("F16",) * 3, 1, 2080, (130, 33, 33), False, seed=166, norm=True)
    assert _run_multi_joined(dev, case, (130, 33, 33), {**case.attrs, **four}) == 1


@pytest.mark.parametrize("env,want", [("0", False), ("1", True), (None, None)])
def test_int8_dots_switch(dev, monkeypatch, env, want):
    """On by default on hardware adapters, off on CPU ones; OXIGPU_INT8_DOTS overrides; a bad value is
    an error that names the variable."""
    if env is None:
        monkeypatch.delenv("OXIGPU_INT8_DOTS", raising=False)
        want = not dev.is_software
    else:
        monkeypatch.setenv("OXIGPU_INT8_DOTS", env)
    assert dev.int8_dots is want
    monkeypatch.setenv("OXIGPU_INT8_DOTS", "yes")
    with pytest.raises(InvalidParameterError, match="OXIGPU_INT8_DOTS"):
        _ = dev.int8_dots


def test_gemv_piece_type_mismatch(dev):
    with pytest.raises(DeviceError, match="does not read"):
        _run(matmul_case("Q6_K", 1, 768, 37, bias=False), dev, {"gemv": {"piece": "q4_k2"}})


@pytest.mark.parametrize("v", [0, 2, 3])
def test_gemv_variants_without_subgroups(dev, v, monkeypatch):
    without_subgroups(monkeypatch)
    _run(matmul_case("Q6_K", 1, _cols("Q6_K", 2), 37, bias=True, seed=50 + v), dev, {"gemv": _GEMV_VARIANTS[v]})
    case = matmul_multi_case(("Q4_K", "Q6_K"), 1, 768, (37, 29), True, seed=51 + v, norm=True)
    assert _run_multi_joined(dev, case, (37, 29), {**case.attrs, "gemv": _GEMV_VARIANTS[v]}) == 1


def test_gemv_config_shapes():
    """Every chosen split fits a workgroup, and small weights still get one group per R rows."""
    for t in TYPES:
        for n, k in [(896, 896), (4864, 896), (896, 4864), (4096, 4096), (14336, 4096), (4096, 14336),
                     (128256, 4096), (67, 640)]:
            c = gemv_config(t, k, n)
            assert c.tpr * c.gpw <= 256 and c.tpr & (c.tpr - 1) == 0 and c.r >= 1


def test_split_rows_ranges():
    for row_bytes, align in [(680, 32), (1050, 32), (210, 32), (34, 256), (4096, 256)]:
        ranges = split_rows(1000, row_bytes, 20000, align)
        assert ranges[0][0] == 0 and sum(r for _, r in ranges) == 1000
        for (a, ra), (b, _) in zip(ranges, ranges[1:]):
            assert a + ra == b
        for r0, rows in ranges:
            assert (r0 * row_bytes) % align == 0 and (rows * row_bytes + 3) // 4 * 4 <= 20000
    with pytest.raises(DeviceError, match="exceed the storage-binding limit"):
        split_rows(1000, 210, 20000, 256)      # 128 rows per aligned offset = 26,880 B


@pytest.mark.parametrize("t,m", [("Q8_0", 1), ("Q6_K", 1), ("Q8_0", 5), ("Q6_K", 17), ("Q4_0", 3)])
def test_binding_split(dev, t, m):
    """Weights over a (forced, small) binding limit run as several row ranges of one buffer."""
    case = matmul_case(t, m, _cols(t, 1), 203, bias=True, seed=11)
    with dev.binding_limit(20000):
        _run(case, dev)


def test_gemma3_lm_head_split_for_real(dev):
    """262,144 x 640 Q8_0 (178 MB) is over lavapipe's 128 MiB binding: split without forcing."""
    rng = np.random.default_rng(5)
    period = 256
    raw = quantize(rng.standard_normal((period, 640), np.float32), "Q8_0")
    x = rng.standard_normal((1, 640)).astype(np.float32)
    big = np.tile(raw, (262144 // period, 1))
    y = run_op("matmul", [x, big], in_types=["f32", "Q8_0"], dev=dev)[0]
    cfg = gemv_config("Q8_0", 640, 262144, dev.int8_dots)
    xr = q8x_round(x, cfg.piece, cfg.ppb32) if cfg.q8x else x.astype(np.float64)   # integer dots: its int8 x
    want = np.tile(xr @ dequantize(raw, "Q8_0").astype(np.float64).T, (1, 262144 // period))
    assert rel_error(y, want) <= 2e-7 * np.sqrt(640)


def _run_multi_joined(dev, case, ns, attrs=None, outs: list | None = None) -> int:
    """Runs ``case`` (matmul_multi) with its weights laid out as WgpuBackend does: weights (and biases)
    of one type back to back in one buffer per type, outputs at 256-aligned offsets of one arena. Checks
    every output against float64 (and appends it to ``outs``); returns the number of dispatches."""
    n_w = len(ns)
    types = case.in_types[1:1 + n_w]
    bias = len(case.inputs) - ("norm_eps" in case.attrs) == 1 + 2 * n_w
    ws, bs = case.inputs[1:1 + n_w], case.inputs[1 + n_w:1 + 2 * n_w] if bias else []
    wb, bb = [None] * n_w, [None] * n_w
    for t in dict.fromkeys(types):
        idx = [i for i, ti in enumerate(types) if ti == t]
        wbuf = dev.upload(gpu_layout(np.concatenate([ws[i].reshape(-1) for i in idx]), t))
        offs = np.cumsum([0] + [ws[i].nbytes for i in idx])
        for j, i in enumerate(idx):
            wb[i] = (wbuf, int(offs[j]), ws[i].nbytes)
        if bias:
            bbuf = dev.upload(np.concatenate([bs[i] for i in idx]))
            offs = np.cumsum([0] + [bs[i].nbytes for i in idx])
            for j, i in enumerate(idx):
                bb[i] = (bbuf, int(offs[j]), bs[i].nbytes)
    m, k = case.inputs[0].shape
    slots = [256 * ((4 * m * n + 255) // 256) for n in ns]
    ybuf = dev.upload(np.full(sum(slots) // 4, np.nan, np.float32))
    yb = [(ybuf, sum(slots[:i]), 4 * m * ns[i]) for i in range(n_w)]
    nw = [case.inputs[-1]] if "norm_eps" in case.attrs else []
    kern = MatmulMultiKernel(dev, attrs or case.attrs, [(m, k), *((n, k) for n in ns),
                                                         *(((n,) for n in ns) if bias else ()), *(w.shape for w in nw)],
                             case.in_types, [(m, n) for n in ns])
    ds = kern.encode([dev.upload(case.inputs[0]), *wb, *(bb if bias else []), *map(dev.upload, nw), *yb])
    dev.write_params(Params(pos=0, n_tokens=m))
    dev.submit(ds)
    for i, want in enumerate(case.reference()):
        got = dev.read(ybuf, np.float32, (m, ns[i]), yb[i][1])
        if outs is not None:
            outs.append(got)
        err = rel_error(got, want)
        assert err <= case.tol, f"{case.name} output {i}: rel. error {err:.3g} > {case.tol:.3g}"
    return len(ds)


# Mixed-type q/k/v as real files have them (Qwen2.5 Q4_K_M: Q5_0 q/k + Q8_0 v; Llama Q4_K_M: Q4_K q/k +
# Q6_K v), the odd type first, a dq8-only type (Q5_K: it must take slot 0), four weights; row counts that
# are not multiples of any group's rows, so groups and workgroups straddle segment ends.
_MIXED = [(("Q5_0", "Q5_0", "Q8_0"), 896, (96, 33, 33)), (("Q4_K", "Q4_K", "Q6_K"), 1024, (130, 67, 37)),
          (("Q6_K", "Q4_K", "Q4_K"), 768, (37, 70, 33)), (("Q6_K", "Q5_K", "Q5_K"), 512, (41, 35, 29)),
          (("Q8_0", "F16", "Q8_0", "F16"), 640, (19, 23, 17, 45)), (("Q4_0", "Q8_0"), 640, (1, 75))]


@pytest.mark.parametrize("i", range(len(_MIXED)))
@pytest.mark.parametrize("bias,norm", [(False, False), (True, False), (True, True)])
def test_matmul_multi_mixed_one_dispatch(dev, i, bias, norm):
    """Two weight types in one GEMV dispatch: every output as in float64."""
    types, k, ns = _MIXED[i]
    case = matmul_multi_case(types, 1, k, ns, bias, seed=70 + i, norm=norm)
    assert _run_multi_joined(dev, case, ns) == 1


@pytest.mark.parametrize("v", [dict(tpr=32, r=1, gpw=4), dict(tpr=64, r=4, gpw=1), dict(tpr=256, r=2, gpw=1),
                               dict(tpr=16, r=8, gpw=4), dict(tpr=32, r=4, gpw=2, u2=True),
                               dict(tpr=32, r=2, gpw=4, piece="q4_k2", u2=True)])
def test_matmul_multi_mixed_splits(dev, v):
    """The mixed GEMV under other splits (slot boundaries inside a workgroup's row range)."""
    case = matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 1, 1024, (130, 67, 37), True, seed=80, norm=True)
    assert _run_multi_joined(dev, case, (130, 67, 37), {**case.attrs, "gemv": v}) == 1


def test_matmul_multi_three_types_falls_back(dev):
    """Three weight types: one dispatch per type, still correct."""
    case = matmul_multi_case(("Q5_0", "Q8_0", "Q4_0"), 1, 640, (40, 33, 21), True, seed=90)
    assert _run_multi_joined(dev, case, (40, 33, 21)) == 3


def test_matmul_multi_two_dq8_types_fall_back(dev):
    """Two types without specialized pieces (both would need slot 0): one dispatch per type."""
    case = matmul_multi_case(("Q3_K", "Q2_K"), 1, 512, (40, 33), False, seed=91)
    assert _run_multi_joined(dev, case, (40, 33)) == 2


# Several rows (decode batches of sequences) as one GEMV: each weight is read once for all rows, and each
# row's result is bit for bit that row's result alone (the same lanes, pieces and steps; issue 23).

def _rows_alone(case, i):
    """``case`` (matmul or matmul_add) for row i of x alone: x, the residual and the reference sliced."""
    ins = list(case.inputs)
    ins[0] = ins[0][i:i + 1]
    if case.op == "matmul_add":
        ins[2] = ins[2][i:i + 1]
    ref = case.reference
    return replace(case, inputs=ins, reference=lambda: [r[i:i + 1] for r in ref()])


def _assert_rows_alone(dev, case, attrs, got):
    for i in range(case.inputs[0].shape[0]):
        one = _rows_alone(case, i)
        alone = run_op(one.op, one.inputs, {**one.attrs, **(attrs or {})}, in_types=one.in_types, dev=dev)[0]
        assert np.array_equal(got[i:i + 1], alone), f"{case.name}: row {i} differs from the row alone"


_Q8X = {"q8x": True, "ppb32": 2}
_BATCHES = [  # (case, gemv overrides)
    (lambda: matmul_case("Q4_K", 5, 1024, 67, bias=True, seed=200), None),
    (lambda: matmul_case("Q6_K", 16, 768, 70, bias=False, seed=201), None),
    (lambda: matmul_case("Q5_K", 9, 512, 37, bias=True, seed=202), None),           # dq8 pieces
    (lambda: matmul_case("F16", 9, 2048, 67, bias=False, seed=203), None),          # clamped x, 2 rows a group
    (lambda: q8x_case(matmul_case("Q8_0", 3, 640, 67, bias=True, seed=204), ["q8_0"]), {**_Q8X, "piece": "q8_0"}),
    (lambda: q8x_case(matmul_case("Q4_K", 7, 1024, 130, bias=False, seed=205), ["q4_k"]),
     {**_Q8X, "piece": "q4_k", "xq": True}),                                      # x quantized by its dispatch
    (lambda: q8x_case(matmul_case("Q6_K", 12, 768, 67, bias=False, seed=206), ["q6_k"]),
     {"q8x": True, "piece": "q6_k", "u2": True, "tpr": 16}),
    (lambda: q8x_case(matmul_case("Q6_K", 16, 768, 67, bias=False, seed=216), ["q6_k"]),
     {"q8x": True, "piece": "q6_k", "u2": True, "tpr": 16, "r": 4, "xr": 4}),   # the LM head's split
    (lambda: matmul_add_case("Q4_K", 4, 1024, 67, bias=True, seed=207), None),
    (lambda: matmul_case("Q8_0", 6, 640, 67, bias=True, seed=208), {"tpr": 64, "r": 8, "gpw": 1, "xr": 1}),
    (lambda: matmul_case("IQ4_XS", 11, 2304, 67, bias=True, seed=209), {"piece": "iq4_xs", "q8x": False}),
    (lambda: q8x_case(matmul_case("IQ4_XS", 16, 2304, 70, bias=False, seed=214), ["iq4_xs"]),
     {"q8x": True, "piece": "iq4_xs", "u2": True, "tpr": 16}),                    # 16 rows, odd block count
    (lambda: q8x_case(matmul_case("IQ4_XS", 2, 1280, 37, bias=True, seed=215), ["iq4_xs"]),
     {"q8x": True, "piece": "iq4_xs", "xq": True}),
]


@pytest.mark.parametrize("i", range(len(_BATCHES)))
def test_gemv_rows_equal_each_row_alone(dev, i):
    case, gemv = _BATCHES[i][0](), _BATCHES[i][1]
    attrs = {"gemv": gemv} if gemv else {}
    got = run_op(case.op, case.inputs, {**case.attrs, **attrs}, in_types=case.in_types, dev=dev)[0]
    err = rel_error(got, case.reference()[0])
    assert err <= case.tol, f"{case.name}: rel. error {err:.3g} > {case.tol:.3g}"
    _assert_rows_alone(dev, case, attrs, got)


def test_gemv_rows_without_subgroups_and_split_bindings(dev, monkeypatch):
    """The workgroup-memory reduction and a weight bound as several row ranges, with several rows."""
    case = matmul_case("Q8_0", 5, 640, 203, bias=True, seed=210)
    with dev.binding_limit(20000):
        got = run_op(case.op, case.inputs, case.attrs, in_types=case.in_types, dev=dev)[0]
        _assert_rows_alone(dev, case, None, got)
    without_subgroups(monkeypatch)
    case = matmul_case("Q4_K", 6, 1024, 67, bias=True, seed=211)
    got = run_op(case.op, case.inputs, case.attrs, in_types=case.in_types, dev=dev)[0]
    assert rel_error(got, case.reference()[0]) <= case.tol
    _assert_rows_alone(dev, case, None, got)


@pytest.mark.parametrize("gemv", [None, {"tpr": 32, "r": 2, "gpw": 4, "u2": True, "q8x": True, "piece": "q4_k",
                                         "ppb32": 2, "xq": True}])
def test_gemv_rows_mixed_norm_multi(dev, gemv):
    """q/k/v of two weight types in one dispatch with the norm prologue, 6 rows: every output against
    float64 (or the int8 twin), every row as alone."""
    case = matmul_multi_case(("Q4_K", "Q4_K", "Q6_K"), 6, 1024, (130, 67, 37), True, seed=212, norm=True)
    if gemv:
        gemv = {**gemv, "piece1": "q6_k"}
        case = q8x_case(case, ["q4_k", "q4_k", "q6_k"])
    attrs = {**case.attrs, **({"gemv": gemv} if gemv else {})}
    outs: list[np.ndarray] = []
    assert _run_multi_joined(dev, case, (130, 67, 37), attrs, outs) == 1 + bool(gemv)
    for i in range(6):
        one: list[np.ndarray] = []
        row = replace(case, inputs=[case.inputs[0][i:i + 1], *case.inputs[1:]],
                      reference=lambda i=i, ref=case.reference: [r[i:i + 1] for r in ref()])
        _run_multi_joined(dev, row, (130, 67, 37), attrs, one)
        assert all(np.array_equal(a[i:i + 1], b) for a, b in zip(outs, one)), f"row {i}"


def _glu_joined(dev, case, attrs=None):
    x, wg, wu, *nw = case.inputs
    m, k = x.shape
    n = wg.shape[0]
    wbuf = dev.upload(gpu_layout(np.concatenate([wg.reshape(-1), wu.reshape(-1)]), case.in_types[1]))
    y = dev.upload(np.full((m, n), np.nan, np.float32))
    kern = MatmulGluKernel(dev, {**case.attrs, **(attrs or {})}, [(m, k), (n, k), (n, k), *(w.shape for w in nw)],
                           case.in_types, [(m, n)])
    ds = kern.encode([dev.upload(x), (wbuf, 0, wg.nbytes), (wbuf, wg.nbytes, wu.nbytes), *map(dev.upload, nw), y])
    dev.write_params(Params(pos=0, n_tokens=m))
    dev.submit(ds)
    return dev.read(y, np.float32, (m, n)), len(ds)


@pytest.mark.parametrize("t,norm", [("Q4_K", True), ("Q8_0", False)])
def test_gemv_rows_glu(dev, t, norm):
    """Gate and up joined as one GEMV with the activation epilogue for 5 rows (two x-row blocks: R >= 2
    keeps a gate and an up row per group): against float64, every row as alone."""
    case = matmul_glu_case(t, 1024 if t == "Q4_K" else 640, 67, "silu", norm, seed=213, m=5)
    got, n_disp = _glu_joined(dev, case)
    assert n_disp == 1 and rel_error(got, case.reference()[0]) <= case.tol
    for i in range(5):
        row = replace(case, inputs=[case.inputs[0][i:i + 1], *case.inputs[1:]])
        assert np.array_equal(got[i:i + 1], _glu_joined(dev, row)[0]), f"row {i}"


def test_gemv_rows_on_hardware_defaults(dev, monkeypatch):
    """With integer dots on (a hardware adapter's default), a node whose one-row GEMV stages x per
    workgroup (xs) quantizes x by the dispatch for several rows: the same int8 x, so each row still
    equals the row alone (which stages it)."""
    monkeypatch.setattr(Device, "int8_dots", property(lambda self: True))
    cfg = gemv_config("Q8_0", 2048, 2048)
    assert cfg.q8x and cfg.xs and cfg.u2
    case = q8x_case(matmul_case("Q8_0", 4, 2048, 2048, bias=False, seed=214, distinct_rows=64), ["q8_0"])
    got = run_op(case.op, case.inputs, case.attrs, in_types=case.in_types, dev=dev)[0]
    assert rel_error(got, case.reference()[0]) <= case.tol
    _assert_rows_alone(dev, case, None, got)


def _tsum_pipelines(dev) -> set[str]:
    return {str(dict(k[2]).get("TSUM")) for k in dev._pipelines if k[0] == "gemv_q.wgsl" and k[1] == "main"}


@pytest.mark.parametrize("i", range(3))
def test_gemv_transposed_sums_same_bits(dev, i):
    """The transposed butterfly (gemv/reduce_sg.wgsl TSUM) adds each group total in the plain butterfly's
    pairs: the same bits, with 8 sums on one row, 16 over 4 x rows (more sums than a lavapipe subgroup's
    lanes) and the x^2 sums of the norm prologue beside them; and it is compiled in (not skipped)."""
    if not dev.has_subgroups:
        pytest.skip("no subgroups: the workgroup-memory reduction")
    q8 = {"q8x": True, "ppb32": 2}
    if i < 2:
        case = q8x_case(matmul_case("Q4_K", 1 if i == 0 else 7, 1024, 70, bias=True, seed=230 + i), ["q4_k"])
        gemv = {**q8, "piece": "q4_k", "tpr": 32, "r": 8, "gpw": 4, "xq": True} if i == 0 else \
            {**q8, "piece": "q4_k", "tpr": 32, "r": 4, "gpw": 2, "xq": True, "xr": 4}
        outs = [run_op(case.op, case.inputs, {**case.attrs, "gemv": {**gemv, "tsum": t}}, in_types=case.in_types,
                       dev=dev)[0] for t in (False, True)]
    else:
        case = matmul_glu_case("Q4_K", 1024, 67, "silu", True, seed=232, m=6)
        outs = [_glu_joined(dev, case, {"gemv": {"tsum": t}})[0] for t in (False, True)]
    assert {"True", "False"} <= _tsum_pipelines(dev)
    assert rel_error(outs[1], case.reference()[0]) <= case.tol
    assert np.array_equal(outs[0], outs[1])


def test_gemv_tsum_code_shuffles():
    """16 sums: 8 + 4 + 2 + 1 shuffles of the halving levels and the scalar levels' loop (one shuffle in it);
    no transposed form for a count that is not a power of two."""
    code = gemv_tsum_code(16)
    assert code.count("subgroupShuffleXor") == 16 and code.count("if (") >= 4 + 16
    assert gemv_tsum_code(12) == "" and gemv_tsum_code(1) == ""
