"""The experts' kernels (matmul_id) where the experts' weights exceed one storage binding: bound as ranges
of whole experts, one dispatch each, every pair computed by the dispatch that binds its expert."""
from __future__ import annotations

import pytest
from gpu_helpers import without_subgroups

from oxigpu.backends.wgpu.kernel import prepare
from oxigpu.backends.wgpu.ops.moe import _moe_case
from oxigpu.tools.kernels import run_case

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("T,n_tokens,per_slot", [(1, 1, False), (4, 3, True), (12, 10, False), (9, 9, True)])
def test_matmul_id_over_expert_ranges(dev, T, n_tokens, per_slot):
    """8 experts of 64 Q4_K rows (9216 B each) under a 30000 B binding limit: 3 ranges (3, 3 and 2
    experts). One token and four (the GEMV: pairs <= experts, padded pairs stored as zeros), 12 and 9
    (the grouped GEMM: the padding's pseudo-expert tiles in the first range's dispatch only)."""
    case = _moe_case(f"ranges T={T}", "Q4_K", T, n_tokens, 8, 2, 64, 256, per_slot, seed=20 + T)
    with dev.binding_limit(30000):
        res = run_case("moe", case, dev)
        p = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
    k = p.kernel.ex
    assert len(k.gemv.ranges if k.gemv is not None else k.ranges) == 3
    assert res.ok, (res.error, res.tol, res.note)


@pytest.mark.parametrize("T,n_tokens,N,int8", [(1, 1, 96, False), (4, 3, 130, False), (1, 1, 1024, True)])
def test_matmul_id_glu_over_joined_weights(dev, monkeypatch, T, n_tokens, N, int8):
    """The experts' gate and up weights back to back in one buffer (as the backend stores a matmul_id_glu's):
    one experts' GEMV with the GLU in its epilogue (integer dots where asked: x rounded as the reference
    rounds it), padded tokens' pairs stored as zeros; against float64."""
    import numpy as np

    from oxigpu.backends.wgpu.device import Params
    from oxigpu.backends.wgpu.kernel import KERNELS, case_error, load_kernels
    from oxigpu.backends.wgpu.ops.moe import moe_glu_case
    monkeypatch.setenv("OXIGPU_INT8_DOTS", "1" if int8 else "0")
    load_kernels()
    case = moe_glu_case("Q4_K", T, n_tokens, 8, 4 if int8 else 2, N, 512, "silu", seed=30 + T)
    x, wg, wu, ids = case.inputs
    shapes = [a.shape for a in (x,)] + [(8, N, 512)] * 2 + [ids.shape]
    cls = KERNELS["matmul_id_glu"]
    k = cls(dev, case.attrs, shapes, case.in_types, cls.output_shapes(shapes, case.attrs))
    joined = dev.create_buffer(wg.nbytes + wu.nbytes, label="gate+up")
    dev.write(joined, wg, 0)
    dev.write(joined, wu, wg.nbytes)
    bufs = [dev.create_buffer(a.nbytes, label="in") for a in (x, ids)]
    for b, a in zip(bufs, (x, ids)):
        dev.write(b, a, 0)
    out_shape = cls.output_shapes(shapes, case.attrs)[0]
    y = dev.create_buffer(4 * int(np.prod(out_shape)), label="y")
    dev.write(y, np.full(out_shape, np.nan, np.float32), 0)
    ds = k.encode([bufs[0], (joined, 0, wg.nbytes), (joined, wg.nbytes, wu.nbytes), bufs[1], y])
    assert k.used_fused and len(ds) == (2 if int8 and k.fused.cfg.xq else 1)
    assert k.fused.cfg.q8x == int8
    dev.write_params(Params(pos=0, n_tokens=n_tokens, n_seqs=1))
    dev.submit(ds)
    got = dev.read(y, np.float32, out_shape)
    case = k.as_computed(case)
    err, tol = case_error(case, [got], case.reference())
    assert err <= tol, (err, tol)


@pytest.mark.parametrize("E,K,d", [(128, 8, 2048), (300, 8, 136)])
def test_moe_route_twice_in_one_pass(dev, E, K, d):
    """The fused norm + router + gate twice in one pass on different rows: the token's last workgroup resets
    its counter, so the second dispatch routes too (a stale counter would leave its ids/w unwritten: NaN)."""
    import numpy as np

    from oxigpu.backends.wgpu.device import Params
    from oxigpu.backends.wgpu.kernel import KERNELS, case_error, load_kernels
    from oxigpu.backends.wgpu.ops.moe import moe_route_case
    load_kernels()
    cases = [moe_route_case("F32", 2, 2, E, K, d, True, 1.0, seed=s) for s in (1, 2)]
    cls = KERNELS["moe_route"]
    shapes = [(2, d), (E, d), (d,)]
    k = cls(dev, cases[0].attrs, shapes, cases[0].in_types, cls.output_shapes(shapes, cases[0].attrs))
    assert k.groups >= 2 * 32                        # at least 32 workgroups a token, counted per token
    ds, outs = [], []
    for case in cases:
        ins = [dev.create_buffer(a.nbytes, label="in") for a in case.inputs]
        for b, a in zip(ins, case.inputs):
            dev.write(b, a, 0)
        out = [dev.create_buffer(4 * int(np.prod(s)), label="out") for s in k.out_shapes]
        for b, s in zip(out, k.out_shapes):
            dev.write(b, np.full(s, np.nan, np.float32), 0)
        ds += k.encode(ins + out)
        outs.append(out)
    dev.write_params(Params(pos=0, n_tokens=2, n_seqs=1))
    dev.submit(ds)
    for case, out in zip(cases, outs):
        got = [dev.read(b, np.float32, s) for b, s in zip(out, k.out_shapes)]
        err, tol = case_error(case, got, case.reference())
        assert err <= tol, (case.name, err, tol)


@pytest.mark.parametrize("rpw,wg,subgroups", [(1, None, True), (2, 256, True), (8, None, True), (2, None, False)])
def test_moe_route_splits(dev, monkeypatch, rpw, wg, subgroups):
    """The fused norm + router + gate with 1, 2 or 8 router rows a workgroup (128, 64 or 16 workgroups a
    token, the counter's last one gating), 256 lanes for 128 experts, and the shared-memory reductions
    where subgroups are missing (the gate's reductions too)."""
    from dataclasses import replace

    from oxigpu.backends.wgpu.ops.moe import moe_route_case
    if not subgroups:
        without_subgroups(monkeypatch)
    case = moe_route_case("F32", 2, 2, 128, 8, 512, True, 1.0, seed=rpw)
    over = {"rpw": rpw} | ({"wg": wg} if wg else {})
    case = replace(case, attrs=case.attrs | {"route": over})
    p = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
    assert p.kernel.groups == 2 * -(-128 // rpw)
    res = run_case("moe", case, dev)
    assert res.ok, (res.error, res.tol, res.note)


@pytest.mark.parametrize("over", [{"q8x": True, "xq": True}, {"q8x": True, "xq": True, "r": 4, "u2": True},
                                  {"r": 2}])
def test_matmul_id_sum_add_splits(dev, monkeypatch, over):
    """The experts' GEMV with the weighted sum and the residual in its epilogue on integer dots (x quantized
    by a dispatch; 4 rows a group, two pieces a step) and float dots with 2 rows a group: one token of 8
    experts of 2048 rows and one of them padded beside, against float64 (x rounded as the kernel rounds)."""
    from dataclasses import replace

    from oxigpu.backends.wgpu.kernel import load_kernels
    from oxigpu.backends.wgpu.ops.moe import moe_sum_add_case
    monkeypatch.setenv("OXIGPU_INT8_DOTS", "1")
    load_kernels()
    for T, n in ((1, 1), (2, 1)):
        case = moe_sum_add_case("Q6_K", T, n, 16, 8, 2048, 768, seed=40 + T)
        case = replace(case, attrs={"gemv": over})
        p = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
        cfg = p.kernel.fused.cfg
        assert cfg.gpw == 8 and cfg.q8x == over.get("q8x", cfg.q8x) and len(p.dispatches) == 1 + cfg.xq
        res = run_case("moe", case, dev)
        assert res.ok, (T, res.error, res.tol, res.note)
