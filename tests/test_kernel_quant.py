"""Every weight type on the GPU kernels, beyond the N(0, 1) cases of test_kernel_matmul / test_kernel_gemm.

The registered ``quant`` checks (ops/quant_checks.py, also run by ``oxigpu kernels --filter quant``): random
blocks at the largest and the smallest normal f16 scales through the GEMV and the short GEMM (float64
references, the f32 tolerance), and the generic integer-dot GEMV piece (``gemv/q32.wgsl``) against its
twin. The tiled f32 and integer-dot GEMM cases of that check run per type in test_kernel_matmul
(``test_tiled_gemm_every_type``) and test_kernel_gemm (``test_q8_every_type``, every loader); here, to keep
lavapipe's compile time down, the q32 GEMV runs on one type of each loader form (a scale per 32, per 16,
with a min), which all share the piece's code.
"""
from __future__ import annotations

from dataclasses import replace
from pathlib import Path

import numpy as np
import pytest

from oxigpu.backends.wgpu.kernel import CHECKS, case_error, load_kernels, rel_error, run_op
from oxigpu.backends.wgpu.ops.gemm import Q8_FK16, Q8_MINS, Q8_TYPES
from oxigpu.backends.wgpu.ops.matmul import GEMV_PIECES, TYPES, gemv_config, matmul_case
from oxigpu.backends.wgpu.ops.quant_checks import gemv_piece, scales_case
from oxigpu.quant import SUPPORTED, dequantize
from oxigpu.quant.iquants import TABLE_TYPES
from oxigpu.quant.samples import random_blocks

pytestmark = pytest.mark.gpu

BLOCKS = Path(__file__).parent / "fixtures" / "quants" / "ggml_blocks.npz"
Q32_FORMS = ("IQ4_XS", "IQ2_XS", "Q5_1")
"""One q32 loader of each form: a scale per 32 elements, per 16 (FK 16), a scale and a min (HM)."""


@pytest.fixture(scope="module")
def quant_cases():
    load_kernels()
    return list(CHECKS["quant"]())


def _run(case, dev) -> None:
    got = run_op(case.op, case.inputs, case.attrs, case.pos, case.n_tokens, case.in_types, dev)
    err, tol = case_error(case, got, case.reference())
    assert err <= tol, f"{case.name}: rel. error {err:.3g} > {tol:.3g}"


def test_every_registered_type_has_kernels():
    assert set(TYPES) == set(SUPPORTED)
    assert set(Q8_FK16) <= set(Q8_TYPES) and set(Q8_MINS) <= set(Q8_TYPES)
    assert set(Q8_TYPES) == set(SUPPORTED) - {"F32", "F16", "BF16", "Q2_K"}
    assert {gemv_config(t, 4096, 4096).piece for t in TYPES if t not in GEMV_PIECES} == {"q32", "dq8"}


@pytest.mark.parametrize("t", TYPES)
def test_extreme_scales(dev, quant_cases, t):
    """GEMV on blocks of the largest f16 scales, the short GEMM on the smallest normal ones (the
    registered cases), and the check can fail: the reference of other weights is far off."""
    cases = [c for c in quant_cases if c.name.startswith(f"{t} ") and "scales" in c.name]
    assert [c.name.split()[1] for c in cases] == ["huge", "tiny"]
    for case in cases:
        _run(case, dev)
    huge = cases[0]
    other = scales_case(t, 1, huge.inputs[0].shape[1], 67, "huge", seed=1)
    got = run_op(huge.op, huge.inputs, {}, in_types=huge.in_types, dev=dev)[0]
    assert rel_error(got, other.reference()[0]) > 0.1


@pytest.mark.parametrize("t", Q32_FORMS)
def test_q32_gemv_integer_and_float_dots(dev, quant_cases, t):
    """The generic GEMV piece (IQ4_XS: its own one for the registered case): integer dots against the int8
    twin (the registered case), float dots against float64."""
    (case,) = [c for c in quant_cases if c.name.startswith(f"{t} 1x") and "int8 x" in c.name]
    assert case.attrs["gemv"]["piece"] == gemv_piece(t) == ("iq4_xs" if t == "IQ4_XS" else "q32")   # its own piece
    _run(case, dev)
    c = matmul_case(t, 1, case.inputs[0].shape[1], 37, bias=True, seed=5)
    _run(replace(c, attrs={"gemv": {"q8x": False, "piece": "q32"}}), dev)


def test_table_types_bind_their_table(dev):
    """A kernel over a table type builds and reads its table; the tables are uploaded once per device."""
    from oxigpu.backends.wgpu.ops.quant_grid import GRID_BINDING, grid_binds
    for t in TABLE_TYPES:
        b = grid_binds(dev, t)
        assert list(b) == [GRID_BINDING] and b[GRID_BINDING] is grid_binds(dev, t)[GRID_BINDING]
    assert grid_binds(dev, "IQ1_M") == grid_binds(dev, "IQ1_S") and grid_binds(dev, "Q4_K") == {}
    assert np.isfinite(dev.read(grid_binds(dev, "IQ2_S")[GRID_BINDING], np.float32, (4,))).all()


@pytest.mark.parametrize("t", [t for t in TYPES if t != "F32"])
def test_gemv_on_ggml_written_blocks(dev, t):
    """The GEMV on ggml-quantized rows (tests/fixtures/quants/ggml_blocks.npz: rows of every scale from
    2^-20, whose f16 scales are subnormal, to 2^10), each output within the f32 bound of its own row's
    sum of |w x| (a row of tiny weights is not hidden by a row of large ones)."""
    data = np.load(BLOCKS)
    raw = data[f"q_{t}"]
    w = dequantize(raw, t).astype(np.float64)
    x = np.random.default_rng(3).standard_normal((1, w.shape[1])).astype(np.float32)
    got = run_op("matmul", [x, raw], {}, in_types=["f32", t], dev=dev)[0][0]
    scale = np.abs(w * x.astype(np.float64)).sum(axis=1)
    diff = np.abs(got - w @ x[0].astype(np.float64))
    assert (diff <= 2e-7 * np.sqrt(w.shape[1]) * scale).all(), diff / np.maximum(scale, 1e-300)
    assert (scale > 0).sum() >= 6       # rows all zero only where ggml's f16 scale underflowed


@pytest.mark.parametrize("t", ["IQ2_XXS", "IQ4_XS"])
@pytest.mark.parametrize("T,n_tokens", [(1, 1), (6, 5)])
def test_expert_matmul_and_add_rows_bind_the_table(dev, t, T, n_tokens):
    """The other kernels that read weights through the quant snippets, on a grid type and a codebook type:
    matmul_id (one token: the per-pair GEMV; several: the grouped GEMM) and add_rows, against float64."""
    from oxigpu.backends.numpy_ops import add_rows as add_rows_ref
    from oxigpu.backends.numpy_ops import matmul_id as matmul_id_ref
    from oxigpu.backends.wgpu.kernel import Case
    from oxigpu.backends.wgpu.ops.gemm import q8_tie_free
    from oxigpu.tools.kernels import run_case
    g = np.random.default_rng(7)
    E, N, K_in, K = 4, 24, 256, 2
    raw = random_blocks(t, E * N, K_in, g)
    ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    x = q8_tie_free(g.standard_normal((T, K_in)).astype(np.float32))
    w = dequantize(raw, t).reshape(E, N, K_in).astype(np.float64)
    case = Case("matmul_id", f"{t} T={T}", [x, raw.reshape(E, N, -1), ids], ["f32", t, "i32"],
                lambda: [matmul_id_ref(x.astype(np.float64), w, ids, n_tokens=n_tokens)], 2e-5, n_tokens=n_tokens)
    res = run_case("quant", case, dev)      # against the reference as the kernel rounds (int8 or f16 x on GPUs)
    assert res.ok, (res.error, res.tol, res.note)
    table = random_blocks(t, 8, K_in, g)
    got = run_op("add_rows", [x, table], {"row": 3}, n_tokens=n_tokens, in_types=["f32", t], dev=dev)[0]
    want = add_rows_ref(x.astype(np.float64), dequantize(table, t).astype(np.float64), row=3, n_tokens=n_tokens)
    assert rel_error(got[:n_tokens], want[:n_tokens]) <= 1e-6
    positions = np.array([5, 0, 7, 2, 6, 1][:T], np.int32)    # absolute position embeddings: rows by position
    got = run_op("add_rows", [x, table, positions], {"row": -1}, n_tokens=n_tokens, in_types=["f32", t, "i32"],
                 dev=dev)[0]
    want = add_rows_ref(x.astype(np.float64), dequantize(table, t).astype(np.float64), positions, row=-1,
                        n_tokens=n_tokens)
    assert rel_error(got, want) <= 1e-6 and np.array_equal(got[n_tokens:], x[n_tokens:])


@pytest.mark.parametrize("norm", [False, True])
def test_mixed_qkv_gemv_with_a_table_type(dev, norm):
    """q/k of a table type and v of a type with a piece file, joined as WgpuBackend joins them: one GEMV
    dispatch over both types (the table type in slot 0 through dq8, its table bound beside the two
    slots' weights), every output against float64; and with integer dots (q32 in slot 0)."""
    from test_kernel_matmul import _run_multi_joined

    from oxigpu.backends.wgpu.ops.matmul import Gemv, matmul_multi_case, q8x_case
    types, ns = ("IQ3_S", "IQ3_S", "Q8_0"), (96, 33, 33)
    case = matmul_multi_case(types, 1, 768, ns, True, seed=9, norm=norm)
    assert Gemv.mixable(dev, ["IQ3_S", "Q8_0"], [1000, 1000]) == [0, 1]
    assert _run_multi_joined(dev, case, ns) == 1
    gv = {"q8x": True, "piece": "q32", "piece1": "q8_0", "ppb32": 2}
    twin = q8x_case(case, ["q32", "q32", "q8_0"])
    assert _run_multi_joined(dev, twin, ns, {**case.attrs, "gemv": gv}) == 1
