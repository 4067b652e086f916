"""Quantized KV caches (llama.cpp's -ctk/-ctv: q8_0, q4_0; oxigpu/quant/kvcache.py): the numpy reference's
blocks against ggml's formulas, the wgpu stores bit-exact with numpy, every attention kernel over
quantized caches against a float64 reference on the dequantized values, the engine on both backends, the
refusals, and the perplexity cost on a real model."""
from __future__ import annotations

import numpy as np
import pytest

from oxigpu.backends import numpy_ops as ops
from oxigpu.errors import InvalidParameterError
from oxigpu.quant import kvcache as kvq

PAIRS = [("q8_0", "q8_0"), ("q4_0", "q4_0"), ("f16", "q8_0"), ("q4_0", "f16")]


def _cache(kind: str, x: np.ndarray) -> np.ndarray:
    return x.astype(np.float16) if kind == "f16" else kvq.quantize_rows(x, kind)


def _values(kind: str, c: np.ndarray, width: int) -> np.ndarray:
    return kvq.dequantize_rows(c.view(np.uint8) if kind == "f16" else c, kind, width).astype(np.float64)


def test_blocks_follow_ggml_formulas():
    """q8_0: d = amax / 127, q = round half away from zero; q4_0: d = (largest-magnitude value) / -8,
    q = min(15, trunc(x / d + 8.5)); d stored as f16; an all-zero block stores zeros."""
    g = np.random.default_rng(0)
    x = (g.standard_normal((3, 64)) * 4).astype(np.float32)
    x[0, :32] = 0
    x[1, 7] = 2.5 * float(np.abs(x[1, :32]).max() / 127 * 0 + 1)   # a plain value; ties come from rounding
    for kind in ("q8_0", "q4_0"):
        raw = kvq.quantize_rows(x, kind)
        assert raw.shape == (3, kvq.row_bytes(kind, 64)) and kvq.row_bytes(kind, 64) == 2 * kvq.BLOCK_BYTES[kind]
        blocks = raw.reshape(-1, kvq.BLOCK_BYTES[kind])
        xb = x.reshape(-1, 32)
        d = blocks[:, :2].copy().view(np.float16)[:, 0].astype(np.float32)
        if kind == "q8_0":
            want_d = np.abs(xb).max(1) / np.float32(127)
            idv = np.where(want_d == 0, 0, np.float32(1) / np.where(want_d == 0, 1, want_d)).astype(np.float32)
            v = xb * idv[:, None]
            want_q = (np.sign(v) * np.floor(np.abs(v) + np.float32(0.5))).astype(np.int8)
            assert np.array_equal(blocks[:, 2:].view(np.int8), want_q)
        else:
            m = xb[np.arange(len(xb)), np.abs(xb).argmax(1)]
            want_d = m / np.float32(-8)
            idv = np.where(want_d == 0, 0, np.float32(1) / np.where(want_d == 0, 1, want_d)).astype(np.float32)
            q = np.minimum(15, np.trunc(xb * idv[:, None] + np.float32(8.5))).astype(np.uint8)
            assert np.array_equal(blocks[:, 2:], q[:, :16] | (q[:, 16:] << 4))
        assert np.array_equal(d, want_d.astype(np.float16).astype(np.float32))
        back = kvq.dequantize_rows(raw, kind, 64)
        assert np.all(back[0, :32] == 0)
        step = np.repeat(np.abs(d), 32).reshape(3, 64)
        assert np.all(np.abs(back - x) <= step * (0.5 if kind == "q8_0" else 1.0) + 1e-7)


def test_refusals():
    from oxigpu.graph.ir import Graph
    with pytest.raises(InvalidParameterError, match="f16, q8_0, q4_0"):
        kvq.check_type("q5_0", "cache_type_k")
    with pytest.raises(InvalidParameterError, match="multiple of 64"):
        Graph(1).state("cache_k.0", (32, 96), "q8_0")
    assert kvq.check_type("Q8_0") == "q8_0"


def test_engine_refuses_bad_types(tiny_models):
    from oxigpu import LLM
    with pytest.raises(InvalidParameterError, match="cache_type_v must be one of f16, q8_0, q4_0"):
        LLM(tiny_models["tiny-llama"], backend="numpy", n_ctx=64, cache_type_v="q4_1")


def test_block_bytes_by_type():
    from types import SimpleNamespace

    from oxigpu.runtime.kvcache import block_bytes
    hp = SimpleNamespace(n_layer=2, n_head_kv=4, head_dim=128, head_dim_v=128)
    assert block_bytes(hp) == 2 * 32 * 2 * 512 * 2
    assert block_bytes(hp, "q8_0", "q8_0") == 2 * 32 * 2 * 16 * 34
    assert block_bytes(hp, "q4_0", "f16") == 2 * 32 * (16 * 18 + 1024)


# -- wgpu kernels (lavapipe in CI) -------------------------------------------------------------------------
def _batch():
    from oxigpu.backends.wgpu.ops._common import Batch
    # a prompt chunk crossing blocks, decode rows at block edges, padding
    return Batch([(1, 30, 9), (0, 95, 1), (2, 0, 1), (3, 63, 2)], 4, 8, 40, pad=3, seed=5)


@pytest.mark.parametrize("ctk,ctv", PAIRS)
@pytest.mark.parametrize("rope", [False, True])
def test_store_matches_numpy(dev, ctk, ctv, rope):
    """kv_store / rope_kv_store into quantized caches: the same bytes as the numpy reference (ggml's
    rounding, f16 scales), rows of other sequences and padding untouched."""
    from oxigpu.backends.wgpu.kernel import run_op
    b = _batch()
    g = np.random.default_rng(3)
    H, Hkv, D = 4, 2, 64
    wk, wv = Hkv * D, Hkv * 128 if ctv != "f16" else Hkv * D
    k = (g.standard_normal((b.T, wk)) * 3).astype(np.float32)
    v = g.standard_normal((b.T, wv)).astype(np.float32)
    k[0, :32] = 0                                   # an all-zero block
    ck = _cache(ctk, g.standard_normal((b.rows, wk)).astype(np.float32))
    cv = _cache(ctv, g.standard_normal((b.rows, wv)).astype(np.float32))
    want_k, want_v = ck.copy(), cv.copy()
    if rope:
        q = g.standard_normal((b.T, H * D)).astype(np.float32)
        ra = dict(head_dim=D, n_rot=D, base=10000.0, neox=True, freq_scale=1.0)
        want_q = ops.rope_kv_store(q, k, v, want_k, want_v, *b.inputs(), n_head=H, n_head_kv=Hkv, **ra,
                                   block_size=b.block, n_tokens=b.n_tokens)
        outs = run_op("rope_kv_store", [q, k, v, ck, cv, *b.inputs()],
                      dict(n_head=H, n_head_kv=Hkv, **ra, block_size=b.block), n_tokens=b.n_tokens,
                      in_types=["f32", "f32", "f32", ctk, ctv, "i32", "i32", "i32"], n_seqs=b.n_seqs)
        got_q, got_k, got_v = outs
        np.testing.assert_allclose(got_q[:b.n_tokens], want_q[:b.n_tokens], rtol=0, atol=2e-5)
        # k is rotated on both sides in f32; a value on a rounding edge may land one step apart
        assert np.mean(got_k.view(np.uint8) != want_k.view(np.uint8)) < 2e-3
        np.testing.assert_allclose(_values(ctk, got_k, wk), _values(ctk, want_k, wk), rtol=0,
                                   atol=0.3 if ctk == "q4_0" else 0.05)
    else:
        ops.kv_store(k, v, want_k, want_v, *b.inputs(), block_size=b.block, n_tokens=b.n_tokens)
        got_k, got_v = run_op("kv_store", [k, v, ck, cv, *b.inputs()], {"block_size": b.block},
                              n_tokens=b.n_tokens, in_types=["f32", "f32", ctk, ctv, "i32", "i32", "i32"],
                              n_seqs=b.n_seqs)
        assert np.array_equal(got_k.view(np.uint8), want_k.view(np.uint8))
    assert np.array_equal(got_v.view(np.uint8), want_v.view(np.uint8))


def _paged_attention_ref(q, kf, vf, b, H, Hkv, D, DV, scale):
    from oxigpu.backends.wgpu.ops.attention import paged_reference
    return paged_reference(q, kf, vf, b, n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=DV, scale=scale)


@pytest.mark.parametrize("ctk,ctv,D,H,Hkv,tuning", [
    ("q8_0", "q8_0", 64, 8, 2, {}),                                    # prefill tiles + decode rows, GQA 4
    ("q4_0", "q4_0", 128, 4, 4, {"n_split": 4, "split_chunk": 32}),    # the decode kernel, splits
    ("f16", "q8_0", 256, 4, 2, {}),
    ("q8_0", "f16", 64, 14, 2, {"n_split": 8, "split_chunk": 32}),     # GQA 7 on the decode kernel
    ("q8_0", "q4_0", 128, 8, 2, {"prefill_tile": "16:1:2s"}),
    ("q8_0", "q8_0", 32, 8, 2, {"n_split": 4, "split_chunk": 32, "decode_gqa": 1}),   # the grouped-query kernel
    ("q4_0", "q8_0", 32, 14, 2, {"n_split": 8, "split_chunk": 32, "decode_gqa": 1}),  # ... rows padded to 8
    ("q8_0", "q4_0", 64, 8, 2, {"n_split": 4, "split_chunk": 32, "decode_gqa": 1, "team_lanes": 8}),  # 2 a lane
])
def test_attention_over_quantized_caches(dev, ctk, ctv, D, H, Hkv, tuning):
    """Every path of the attention op (FMA prefill tiles, the split-KV decode kernel) over quantized caches:
    the float64 attention of the dequantized values (numpy's op agrees to f32 rounding)."""
    from oxigpu.backends.wgpu.kernel import run_op
    b = _batch()
    g = np.random.default_rng(D + H)
    q = g.standard_normal((b.T, H * D)).astype(np.float32)
    ck = _cache(ctk, (g.standard_normal((b.rows, Hkv * D)) * 2).astype(np.float32))
    cv = _cache(ctv, g.standard_normal((b.rows, Hkv * D)).astype(np.float32))
    scale = D ** -0.5
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=scale, block_size=b.block,
                 prefill_mma=False, **tuning)
    got = run_op("attention", [q, ck, cv, *b.inputs()], attrs, n_tokens=b.n_tokens,
                 in_types=["f32", ctk, ctv, "i32", "i32", "i32"], n_seqs=b.n_seqs)[0]
    want = _paged_attention_ref(q, _values(ctk, ck, Hkv * D), _values(ctv, cv, Hkv * D), b, H, Hkv, D, D, scale)
    n = b.n_tokens
    assert np.abs(got[:n] - want[:n]).max() <= 2e-5 * np.abs(want[:n]).max()
    assert np.all(got[n:] == 0)
    mine = ops.attention(q, ck, cv, *b.inputs(), n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=scale,
                         block_size=b.block, n_tokens=n)
    assert np.abs(mine[:n] - want[:n]).max() <= 2e-5 * np.abs(want[:n]).max()


def test_fused_decode_refuses_quantized_caches(dev):
    from oxigpu.backends.wgpu.kernel import run_op
    b = _batch()
    z = np.zeros((b.T, 64), np.float32)
    c = np.zeros((b.rows, 34 * 2), np.uint8)
    with pytest.raises(ValueError, match="f16 caches only"):
        run_op("rope_kv_attention", [z, z, z, c, c, *b.inputs()],
               dict(n_head=1, n_head_kv=1, head_dim=64, v_head_dim=64, scale=0.125, block_size=32, n_rot=64,
                    base=1e4, neox=False), in_types=["f32"] * 3 + ["q8_0", "q8_0"] + ["i32"] * 3)


# -- engine ------------------------------------------------------------------------------------------------
def test_engine_numpy_and_wgpu_agree(dev, tiny_models):
    """Greedy generation with a q8_0 K / q4_0 V cache: the same tokens on numpy and wgpu, or a parting at a
    near-tie of numpy's logits only (fused graphs: the
    quantized store kernel, prefill and decode attention), and the pool counted in quantized bytes."""
    from oxigpu import LLM
    path = tiny_models["tiny-llama"]
    outs, llms = [], []
    for backend in ("numpy", "wgpu"):
        llm = LLM(path, backend=backend, n_ctx=128, max_seqs=2, cache_type_k="q8_0", cache_type_v="q4_0")
        assert llm._engine.cache_types == ("q8_0", "q4_0")
        r = llm.generate("The quick brown fox", max_tokens=12, temperature=0)
        outs.append(list(r.token_ids))
        llms.append(llm)
    if outs[0] != outs[1]:
        # A GPU's rope rounds a key differently from numpy in the last bit now and then, which can move a value
        # across a q8_0 rounding boundary (a step of 1/127 of the block's largest): the two may part only where
        # both backends' logits over the common prefix agree within the cache's rounding and numpy's top two
        # are closer than the backends are to each other (lavapipe agrees token for token)
        j = next(i for i, (a, b) in enumerate(zip(*outs)) if a != b)
        prefix = llms[0].tokenize("The quick brown fox") + outs[0][:j]
        ln, lw = (llm._engine.eval(prefix)[0] for llm in llms)
        diff = float(np.abs(ln - lw).max())
        assert diff <= 5e-2 * np.abs(ln).max(), (j, diff, outs)
        top2 = np.sort(ln)[-2:]
        assert {outs[0][j], outs[1][j]} == set(np.argsort(ln)[-2:].tolist()), (j, outs)
        assert top2[1] - top2[0] <= 2 * diff, f"parted at {j} without a near-tie: {outs}"


def _ppl(path, kinds, n_chars=800):
    from pathlib import Path

    from oxigpu import LLM
    text = (Path(__file__).parents[1] / "README.md").read_text()[:n_chars]
    out = {}
    for kind in kinds:
        llm = LLM(path, backend="numpy", n_ctx=256, cache_type_k=kind, cache_type_v=kind)
        out[kind] = llm.perplexity(text)
        del llm
    return out


def test_perplexity_q8_0(gemma3_path):
    """A real model's perplexity on a real text (~220 tokens): a q8_0 K/V cache within 1 % of f16
    (llama.cpp reports ~0.1 %; docs/perf-log.md has longer texts)."""
    ppl = _ppl(gemma3_path, ("f16", "q8_0"))
    assert abs(ppl["q8_0"] / ppl["f16"] - 1) < 0.01, ppl


@pytest.mark.full
def test_perplexity_q4_0(gemma3_path):
    """q4_0 K/V costs more (its K half most: docs/perf-log.md): within 40 % of f16 here."""
    ppl = _ppl(gemma3_path, ("f16", "q4_0"))
    assert ppl["q4_0"] / ppl["f16"] - 1 < 0.4, ppl


def test_bench_pp_and_tg_at_depth_with_quantized_cache(tiny_models):
    """`oxigpu bench -ctk q8_0 -ctv q8_0 -d 0,64`: pp and tg at each depth (llama-bench's pp512 @ d32768),
    the cache types in the result and the table."""
    from click.testing import CliRunner

    from oxigpu.cli.main import cli
    res = CliRunner().invoke(cli, ["bench", "-m", tiny_models["tiny-llama"], "--backend", "numpy", "-p", "16",
                                   "-n", "4", "-d", "0,64", "-r", "1", "-ctk", "q8_0", "-ctv", "q8_0", "--json"])
    assert res.exit_code == 0, res.output
    import json
    r = json.loads(res.stdout)
    assert r["cache_types"] == ["q8_0", "q8_0"] and r["n_ctx"] >= 64 + 16
    assert [p["depth"] for p in r["pp_depths"]] == [0, 64] and r["pp"]["depth"] == 0
    assert all(p["tokens_per_s"] > 0 for p in r["pp_depths"]) and [t["depth"] for t in r["tg"]] == [0, 64]
    bad = CliRunner().invoke(cli, ["bench", "-m", tiny_models["tiny-llama"], "-ctk", "q5_1"])
    assert bad.exit_code != 0 and "'f16', 'q8_0', 'q4_0'" in bad.output


@pytest.mark.slow
def test_quantized_cache_pipelines_pass_tint(dev, tmp_path, monkeypatch):
    """The kernels of quantized caches as Dawn gets them (its WGSL compiler, Tint, is stricter than naga):
    the stores, the FMA prefill and the decode attention. (The matrix-unit attention needs an adapter with
    subgroup matrices, which Dawn's Null backend lacks: tests/test_kernel_attention.py on the H100.)"""
    pytest.importorskip("wgpudawn")
    from test_dawn_tint import _tint_errors

    from oxigpu.backends.wgpu import device as devmod

    sources: dict[str, str] = {}
    build = devmod.Device.pipeline

    def record(self, file, entry="main", defines=None):
        sources.setdefault(self.shader_source(file, defines, implementation="dawn"), f"{len(sources):03d}-{file}")
        return build(self, file, entry, defines)
    monkeypatch.setattr(devmod.Device, "pipeline", record)
    test_store_matches_numpy(dev, "q8_0", "q4_0", True)
    test_store_matches_numpy(dev, "q4_0", "f16", False)
    test_attention_over_quantized_caches(dev, "q4_0", "q8_0", 64, 8, 2, {})
    test_attention_over_quantized_caches(dev, "q8_0", "f16", 128, 4, 4, {"n_split": 4, "split_chunk": 32})
    for src, name in sources.items():
        (tmp_path / f"{name.replace('/', '_')}.wgsl").write_text(src)
    assert len(sources) >= 4
    assert _tint_errors(tmp_path) == {}


@pytest.mark.parametrize("ctk,ctv,D", [("q8_0", "q8_0", 64), ("q4_0", "q8_0", 128), ("f16", "q4_0", 128)])
def test_matrix_unit_attention_over_quantized_caches(dev, ctk, ctv, D):
    """attention_mma.wgsl (Dawn's subgroup matrices; skipped elsewhere) dequantizes into its staged f16 tile:
    within the f16 kernel's tolerance (2e-3 of max |ref|: q, P and the dequantized values rounded to f16)."""
    if not dev.has_mma:
        pytest.skip("no subgroup matrices on this adapter (the H100 under Dawn has them)")
    from oxigpu.backends.wgpu.kernel import run_op
    from oxigpu.backends.wgpu.ops._common import Batch
    b = Batch([(0, 40, 200), (1, 500, 60), (2, 3, 1)], 3, 24, 80, pad=4, seed=3)
    H, Hkv = 8, 2
    g = np.random.default_rng(D)
    q = g.standard_normal((b.T, H * D)).astype(np.float32)
    ck = _cache(ctk, (g.standard_normal((b.rows, Hkv * D)) * 2).astype(np.float32))
    cv = _cache(ctv, g.standard_normal((b.rows, Hkv * D)).astype(np.float32))
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=D ** -0.5, block_size=b.block,
                 prefill_mma=True)
    got = run_op("attention", [q, ck, cv, *b.inputs()], attrs, n_tokens=b.n_tokens,
                 in_types=["f32", ctk, ctv, "i32", "i32", "i32"], n_seqs=b.n_seqs)[0]
    want = _paged_attention_ref(q, _values(ctk, ck, Hkv * D), _values(ctv, cv, Hkv * D), b, H, Hkv, D, D,
                                D ** -0.5)
    n = b.n_tokens
    assert np.abs(got[:n] - want[:n]).max() <= 2e-3 * np.abs(want[:n]).max()
