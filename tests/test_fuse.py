"""The fusion pass (``oxigpu.graph.fuse``) and its fused kernels.

- graph level: which nodes each tiny architecture's graph fuses into, and that the fused graph's logits on
  the numpy backend equal the unfused graph's (bit for bit in practice; asserted to 1e-5 of max |logit|);
- the fused ops' numpy references vs float64 compositions of the originals;
- the fused kernels (matmul_add, matmul_multi, matmul_glu, rope_kv_store, rope_kv_attention) vs float64
  (registered checks, also run by ``oxigpu kernels``), including the joined paths of ``matmul_multi`` and ``matmul_glu``
  (weights of one type back to back in one buffer: one dispatch);
- wgpu == numpy on the fused graphs is ``tests/test_wgpu_backend.py`` (build_graph fuses by default).
"""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.backends import numpy_ops
from oxigpu.backends.base import Step
from oxigpu.backends.numpy_backend import NumpyBackend
from oxigpu.backends.wgpu.device import Params
from oxigpu.backends.wgpu.kernel import (
    CHECKS,
    Case,
    case_error,
    load_kernels,
    rel_error,
    run_case,
)
from oxigpu.backends.wgpu.layout import gpu_layout
from oxigpu.backends.wgpu.ops.matmul import (
    MatmulGluKernel,
    MatmulMultiKernel,
    matmul_multi_case,
)
from oxigpu.gguf import GGUFFile
from oxigpu.graph.plan import compile
from oxigpu.models import build_graph

SHAPES = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]
N_CTX = 64


@pytest.fixture(scope="module")
def synth_files(tmp_path_factory):
    from oxigpu.synth import synthesize
    d = tmp_path_factory.mktemp("synth")
    return {s: synthesize(s, d / f"{s}.gguf", ftype="Q4_K_M", seed=3, workers=1).path for s in SHAPES}


def _ops(g) -> list[str]:
    return [n.op for n in g.nodes if n.name.startswith("blk.0.")]


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_ops_per_layer(synth_files, shape):
    """q/k/v become matmul_multi, gate/up + glu matmul_glu, both with the norm before them in their
    prologue; residual adds fold into their matmul, or, where gemma3's post-norms sit between them, into
    the post-norm (rms_norm_add); rope q, rope k, kv_store and (decode only) the attention become one node:
    5 dispatching nodes a decode layer (gemma3: 7); no new values appear."""
    model = GGUFFile(synth_files[shape])
    plain, fused = build_graph(model, None, 1, N_CTX, fuse=False), build_graph(model, None, 1, N_CTX)
    ops = _ops(fused)
    assert ops.count("matmul_multi") == 1 and ops.count("matmul_glu") == 1 and "glu" not in ops
    assert ops.count("rope_kv_attention") == 1
    assert not {"rope", "kv_store", "rope_kv_store", "attention"} & set(ops)
    # attn_norm and ffn_norm moved into the GEMVs' prologue, per-head q/k norms into the decode attention
    # (attr qk_norm_eps); post-norms take their residual add
    assert ops.count("rms_norm") == 0 and "add" not in ops
    assert ops.count("rms_norm_add") == {"tiny-gemma3": 2}.get(shape, 0)
    rka = [n for n in fused.nodes if n.op == "rope_kv_attention"]
    assert all(("qk_norm_eps" in n.attrs) == (shape in ("tiny-qwen3", "tiny-gemma3")) for n in rka)
    assert all("norm_eps" in n.attrs for n in fused.nodes if n.op in ("matmul_multi", "matmul_glu"))
    assert ops.count("matmul_add") == (0 if shape == "tiny-gemma3" else 2)
    assert "matmul" not in ops or shape == "tiny-gemma3"
    assert len(ops) == {"tiny-gemma3": 7}.get(shape, 5)
    assert len(fused.nodes) < len(plain.nodes)
    prefill = build_graph(model, None, 8, N_CTX)
    assert all("norm_eps" in n.attrs for n in prefill.nodes if n.op in ("matmul_multi", "matmul_glu"))
    prefill = _ops(prefill)                                      # the fused attention is decode-only
    assert prefill.count("matmul_multi") == 1 and prefill.count("matmul_glu") == 1 and "glu" not in prefill
    # the pre-norms moved in here too; q/k norms stay (the prefill rope_kv_store takes none)
    assert prefill.count("rms_norm") == {"tiny-qwen3": 2, "tiny-gemma3": 2}.get(shape, 0)
    assert prefill.count("rms_norm_add") == {"tiny-gemma3": 2}.get(shape, 0)
    assert prefill.count("rope_kv_store") == 1 and prefill.count("attention") == 1
    assert "rope_kv_attention" not in prefill
    names = lambda g: {v.name for n in g.nodes for v in n.outputs}  # noqa: E731
    assert names(fused) <= names(plain)
    # a decode bucket of 4 sequences (one row each) fuses the attention too; a mixed step of 8 rows of 4
    # sequences does not (a row may need the keys of the rows before it in the step)
    assert _ops(build_graph(model, None, 4, N_CTX, S=4)).count("rope_kv_attention") == 1
    mixed = build_graph(model, None, 8, N_CTX, S=4)
    assert "rope_kv_attention" not in _ops(mixed) and mixed.nodes[-3].op == "gather_rows"


@pytest.mark.parametrize("shape", SHAPES)
def test_fused_logits_equal_unfused_on_numpy(synth_files, shape):
    """Chunked prefill then decode: the fused graph's logits equal the unfused graph's."""
    model = GGUFFile(synth_files[shape])
    vocab = len(model.metadata["tokenizer.ggml.tokens"])
    toks = np.random.default_rng(5).integers(0, vocab, 14).astype(np.int32)
    logits = []
    for fuse in (False, True):
        pre = compile(build_graph(model, None, 8, N_CTX, "all", fuse=fuse))
        dec = compile(build_graph(model, None, 1, N_CTX, "last", fuse=fuse))
        nb = NumpyBackend(model, N_CTX)
        out = [nb.run(pre, Step.single(toks[:5], 0))["logits"][:5]]
        out += [nb.run(dec, Step.single(toks[p:p + 1], p))["logits"] for p in range(5, 14)]
        logits.append(out)
    for a, b in zip(*logits):
        assert np.isfinite(a).all() and np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


MOE_SHAPES = ["tiny-qwen3moe", "tiny-mixtral", "tiny-olmoe"]


@pytest.fixture(scope="module")
def moe_files(tmp_path_factory):
    from oxigpu.synth import synthesize
    d = tmp_path_factory.mktemp("synth_moe")
    return {s: synthesize(s, d / f"{s}.gguf", ftype="Q4_K_M", seed=3, workers=1).path for s in MOE_SHAPES}


@pytest.mark.parametrize("shape", MOE_SHAPES)
def test_moe_fusions_and_logits_on_numpy(moe_files, shape):
    """The experts' gate/up + glu become matmul_id_glu and the mix + residual add moe_sum_add, in decode and
    prefill graphs (decode: with the down matmul_id, matmul_id_sum_add); chunked prefill then decode gives
    the unfused graph's logits on the numpy backend."""
    model = GGUFFile(moe_files[shape])
    for T in (1, 8):
        ops = _ops(build_graph(model, None, T, N_CTX))
        assert ops.count("matmul_id_glu") == 1 and ops.count("matmul_id") == (T == 8) and "glu" not in ops
        assert ops.count("moe_sum_add") == (T == 8) and ops.count("matmul_id_sum_add") == (T == 1)
        assert "moe_sum" not in ops
        # decode: the FFN's norm, router and gate are one moe_route; prefill keeps the three
        assert ops.count("moe_route") == (T == 1) and ops.count("moe_gate") == (T == 8)
        assert ops.count("matmul") == (T == 8)
    assert "moe_route" in _ops(build_graph(model, None, 4, N_CTX, S=4))       # a decode bucket of 4
    vocab = len(model.metadata["tokenizer.ggml.tokens"])
    toks = np.random.default_rng(6).integers(0, vocab, 12).astype(np.int32)
    logits = []
    for fuse in (False, True):
        pre = compile(build_graph(model, None, 8, N_CTX, "all", fuse=fuse))
        dec = compile(build_graph(model, None, 1, N_CTX, "last", fuse=fuse))
        nb = NumpyBackend(model, N_CTX)
        out = [nb.run(pre, Step.single(toks[:5], 0))["logits"][:5]]
        out += [nb.run(dec, Step.single(toks[p:p + 1], p))["logits"] for p in range(5, 12)]
        logits.append(out)
    for a, b in zip(*logits):
        assert np.isfinite(a).all() and np.abs(a - b).max() <= 1e-5 * np.abs(a).max()


def test_moe_numpy_references_are_the_compositions():
    rng = np.random.default_rng(1)
    T, E, K, n, k = 5, 6, 2, 16, 24
    x = rng.standard_normal((T, k), np.float32)
    wg, wu = (rng.standard_normal((E, n, k), np.float32) for _ in range(2))
    ids = np.stack([rng.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
    g, u = (numpy_ops.matmul_id(x, w, ids, n_tokens=4) for w in (wg, wu))
    assert np.array_equal(numpy_ops.matmul_id_glu(x, wg, wu, ids, n_tokens=4, act="silu"),
                          numpy_ops.glu(g, u, act="silu"))
    y, w, res = rng.standard_normal((T, K * n), np.float32), rng.random((T, K), np.float32), g[:, :n]
    assert np.array_equal(numpy_ops.moe_sum_add(y, w, res), res + numpy_ops.moe_sum(y, w))
    xs = rng.standard_normal((T, K * k), np.float32)
    assert np.array_equal(numpy_ops.matmul_id_sum_add(xs, wg, ids, w, res, n_tokens=4),
                          numpy_ops.moe_sum_add(numpy_ops.matmul_id(xs, wg, ids, n_tokens=4), w, res))
    wr, nw = rng.standard_normal((E, k), np.float32), rng.standard_normal(k, np.float32)
    h, ids, w = numpy_ops.moe_route(x, wr, nw, eps=1e-6, k=K, norm=True, w_scale=2.0, n_tokens=4)
    want_h = numpy_ops.rms_norm(x, nw, eps=1e-6, group=k)
    want = numpy_ops.moe_gate(numpy_ops.matmul(want_h, wr, n_tokens=4), k=K, norm=True, w_scale=2.0, n_tokens=4)
    assert np.array_equal(h, want_h) and np.array_equal(ids, want[0]) and np.array_equal(w, want[1])


def test_numpy_references_are_the_compositions():
    rng = np.random.default_rng(0)
    x, res = rng.standard_normal((3, 40), np.float32), rng.standard_normal((3, 24), np.float32)
    ws = [rng.standard_normal((n, 40), np.float32) for n in (24, 8, 8)]
    bs = [rng.standard_normal(n, np.float32) for n in (24, 8, 8)]
    x64 = x.astype(np.float64)
    got = numpy_ops.matmul_add(x, ws[0], res, bs[0])
    want = x64 @ ws[0].T.astype(np.float64) + bs[0] + res
    assert rel_error(got, want) < 1e-6
    for y, w, b in zip(numpy_ops.matmul_multi(x, *ws, *bs, n_w=3), ws, bs):
        assert rel_error(y, x64 @ w.T.astype(np.float64) + b) < 1e-6
    for y, w in zip(numpy_ops.matmul_multi(x, *ws, n_w=3), ws):
        assert rel_error(y, x64 @ w.T.astype(np.float64)) < 1e-6
    a, b = (x64 @ w.T.astype(np.float64) for w in ws[1:])
    assert rel_error(numpy_ops.matmul_glu(x, ws[1], ws[2], act="silu"), a / (1 + np.exp(-a)) * b) < 1e-6
    nw = rng.uniform(0.5, 1.5, 40).astype(np.float32)
    xn = numpy_ops.rms_norm(x, nw, eps=1e-5, group=40)
    assert np.array_equal(numpy_ops.matmul_glu(x, ws[1], ws[2], nw, act="silu", norm_eps=1e-5),
                          numpy_ops.matmul_glu(xn, ws[1], ws[2], act="silu"))
    for y, z in zip(numpy_ops.matmul_multi(x, *ws, *bs, nw, n_w=3, norm_eps=1e-5),
                    numpy_ops.matmul_multi(xn, *ws, *bs, n_w=3)):
        assert np.array_equal(y, z)


def _two_sequences(T: int, n_blocks: int = 8, block: int = 4):
    """positions, row_seq, block_table of a step: slot 0 at positions 9.., slot 1 at 2.., blocks shuffled."""
    positions = np.array([9, 10, 2, 3, 0, 0][:T], np.int32)
    row_seq = np.array([0, 0, 1, 1, 0, 0][:T], np.int32)
    table = np.array([[5, 1, 7, 0], [2, 6, 0, 0]], np.int32)
    return positions, row_seq, table


def test_rope_kv_store_reference_is_the_composition():
    rng = np.random.default_rng(1)
    q, k, v = (rng.standard_normal((6, n), np.float32) for n in (6 * 32, 2 * 32, 2 * 48))
    ck, cv = np.zeros((32, 64), np.float32), np.zeros((32, 96), np.float32)
    paged = _two_sequences(6)
    ra = dict(head_dim=32, n_rot=16, base=1e4, neox=True, freq_scale=0.5)
    qr = numpy_ops.rope_kv_store(q, k, v, ck, cv, *paged, n_head=6, n_head_kv=2, **ra, block_size=4, n_tokens=4)
    assert np.array_equal(qr, numpy_ops.rope(q, paged[0], n_head=6, **ra))
    ck2, cv2 = np.zeros_like(ck), np.zeros_like(cv)
    numpy_ops.kv_store(numpy_ops.rope(k, paged[0], n_head=2, **ra), v, ck2, cv2, *paged, block_size=4, n_tokens=4)
    assert np.array_equal(ck, ck2) and np.array_equal(cv, cv2)
    rows = [7 * 4 + 1, 7 * 4 + 2, 2 * 4 + 2, 2 * 4 + 3]   # slot 0: 9, 10 in its block 2; slot 1: 2, 3 in its 0
    assert np.array_equal(cv[rows], v[:4]) and np.count_nonzero(cv.any(axis=1)) == 4


def test_rope_kv_attention_reference_is_the_composition():
    rng = np.random.default_rng(2)
    q, k, v = (rng.standard_normal((2, n), np.float32) for n in (6 * 32, 2 * 32, 2 * 48))
    caches = [rng.standard_normal((32, n), np.float32) for n in (64, 96)]
    caches += [c.copy() for c in caches]
    paged = (np.array([9, 2], np.int32), np.array([0, 1], np.int32), _two_sequences(2)[2])
    ra = dict(n_head=6, n_head_kv=2, head_dim=32, n_rot=16, base=1e4, neox=False, freq_scale=0.5, block_size=4,
              n_tokens=2)
    aa = dict(v_head_dim=48, scale=0.2, window=5, softcap=30.0)
    got = numpy_ops.rope_kv_attention(q, k, v, *caches[:2], *paged, **ra, **aa)
    qr = numpy_ops.rope_kv_store(q, k, v, *caches[2:], *paged, **ra)
    want = numpy_ops.attention(qr, *caches[2:], *paged, **{a: ra[a] for a in ("n_head", "n_head_kv", "head_dim",
                                                                              "block_size", "n_tokens")}, **aa)
    assert np.array_equal(got, want) and all(np.array_equal(a, b) for a, b in zip(caches[:2], caches[2:]))


def _registered() -> list[Case]:
    load_kernels()
    return [c for name in ("matmul_add", "matmul_multi", "matmul_glu", "rope_kv_store", "rope_kv_attention",
                           "rope_kv_attention.paged", "rms_norm_add") for c in CHECKS[name]()]


@pytest.mark.gpu
@pytest.mark.parametrize("case", _registered(), ids=lambda c: c.name)
def test_fused_kernel_checks(dev, case):
    got = run_case(case, dev)
    err, tol = case_error(case, got, case.reference())
    assert err <= tol, f"{case.name}: rel. error {err:.3g} > {tol:.3g}"


@pytest.mark.gpu
@pytest.mark.parametrize("m,bias,norm", [(1, False, False), (1, True, False), (6, False, False),
                                         (20, True, False), (1, True, True)])
def test_matmul_multi_joined_is_one_dispatch_per_type(dev, m, bias, norm):
    """Weights of one type back to back in one buffer, outputs in one arena (as WgpuBackend lays them
    out): the GEMV (up to 16 rows) takes the Q5_0 q and k and the Q8_0 v in one dispatch; a GEMM runs one
    dispatch per type; every output as in float64."""
    types, ns, k = ("Q5_0", "Q8_0", "Q5_0"), (96, 40, 33), 640
    case = matmul_multi_case(types, m, k, ns, bias, seed=4, norm=norm)
    ws, bs = case.inputs[1:4], case.inputs[4:7]
    wbuf = dev.upload(gpu_layout(np.concatenate([ws[0].reshape(-1), ws[2].reshape(-1)]), "Q5_0"))   # the Q5_0 pair
    wb = [(wbuf, 0, ws[0].nbytes), dev.upload(gpu_layout(ws[1], "Q8_0")), (wbuf, ws[0].nbytes, ws[2].nbytes)]
    bb = [None] * 3
    if bias:
        bbuf = dev.upload(np.concatenate([bs[0], bs[2]]))
        bb = [(bbuf, 0, 4 * ns[0]), dev.upload(bs[1]), (bbuf, 4 * ns[0], 4 * ns[2])]
    slots = [256 * ((4 * m * n + 255) // 256) for n in ns]    # outputs at 256-aligned arena offsets
    ybuf = dev.upload(np.full(sum(slots) // 4, np.nan, np.float32))
    yb = [(ybuf, sum(slots[:i]), 4 * m * ns[i]) for i in range(3)]
    xbuf = dev.upload(case.inputs[0])
    nw = [case.inputs[-1]] if norm else []
    kern = MatmulMultiKernel(dev, case.attrs, [(m, k), *((n, k) for n in ns), *(((n,) for n in ns) if bias else ()),
                                               *(w.shape for w in nw)], case.in_types, [(m, n) for n in ns])
    ds = kern.encode([xbuf, *wb, *(bb if bias else []), *map(dev.upload, nw), *yb])
    assert len(ds) == (1 if m <= 16 else 2)    # GEMV takes both types in one dispatch; GEMM one per type
    dev.write_params(Params(pos=0, n_tokens=m))
    dev.submit(ds)
    for i, want in enumerate(case.reference()):
        got = dev.read(ybuf, np.float32, (m, ns[i]), yb[i][1])
        assert rel_error(got, want) <= case.tol


@pytest.mark.gpu
@pytest.mark.parametrize("case", [c for c in _registered() if c.op == "matmul_glu" and len(c.inputs[0]) == 1],
                         ids=lambda c: c.name)
def test_matmul_glu_joined_is_one_dispatch(dev, case):
    """One row (tests/test_kernel_gemm.py test_glu_joined runs prefill-sized ones)."""
    x, wg, wu, *nw = case.inputs
    wbuf = dev.upload(gpu_layout(np.concatenate([wg.reshape(-1), wu.reshape(-1)]), case.in_types[1]))
    n, k = wg.shape[0], x.shape[1]
    y = dev.upload(np.full(n, np.nan, np.float32))
    kern = MatmulGluKernel(dev, case.attrs, [(1, k), (n, k), (n, k), *(w.shape for w in nw)], case.in_types,
                           [(1, n)])
    ds = kern.encode([dev.upload(x), (wbuf, 0, wg.nbytes), (wbuf, wg.nbytes, wu.nbytes), *map(dev.upload, nw), y])
    assert len(ds) == 1
    dev.submit(ds)
    assert rel_error(dev.read(y, np.float32, (1, n)), case.reference()[0]) <= case.tol
