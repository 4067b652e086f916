"""The non-matmul kernels (embed, rms_norm, rope, kv_store, add/mul/glu/last_row, attention) vs
float64 references at awkward shapes, plus the numpy oracle, binding splits and replays.

Every run starts from NaN-poisoned outputs (``run_op``) and random non-zero inputs; errors are
max |got - ref| / max |ref|. Tolerances (set per case in the kernels' check registries): 1e-6 for
elementwise/embed/rope, 2e-6 for rms_norm, 2e-5 for attention (f32 softmax over up to 800 keys; its f16
caches are inputs, so the reference reads the same values), 0 for kv_store (f16 rows rounded to nearest
even, as numpy rounds them), last_row.
"""
from __future__ import annotations

import math
from pathlib import Path

import numpy as np
import pytest
from gpu_helpers import without_subgroups

from oxigpu.backends import numpy_ops
from oxigpu.backends.wgpu.device import Device, Params
from oxigpu.backends.wgpu.kernel import CHECKS, Case, case_error, load_kernels, prepare, rel_error, run_case, run_op
from oxigpu.backends.wgpu.ops.attention import attention_case, op_attrs
from oxigpu.backends.wgpu.ops.attention_prefill import prefill_config
from oxigpu.backends.wgpu.ops.embed import table_case

pytestmark = pytest.mark.gpu

MINE = ("elementwise", "rms_norm", "rope", "kv_store", "embed", "attention", "rope.paged", "kv_store.paged",
        "attention.paged", "encoder")   # sample: tests/test_sampling.py


def _check(case: Case, dev: Device) -> float:
    got = run_case(case, dev)
    err, tol = case_error(case, got, case.reference())
    assert err <= tol, f"{case.name}: rel. error {err:.3g} > {tol:.3g}"
    return err


def _registered() -> list[Case]:
    load_kernels()
    return [c for name in MINE for c in CHECKS[name]()]


def test_every_check_runs_in_some_test():
    """Each registered check (but the benchmark-size ones, ``.bench``) is named by a test file that runs
    it: a new op's check otherwise runs only under ``oxigpu kernels``, which CI does not call."""
    load_kernels()
    tests = "".join(p.read_text() for p in Path(__file__).parent.glob("test_*.py"))
    missing = [n for n in CHECKS if not n.endswith(".bench") and f'"{n}"' not in tests]
    assert not missing, f"checks no test runs: {missing}"


@pytest.mark.parametrize("case", _registered(), ids=lambda c: c.name)
def test_registered_checks(dev, case):
    _check(case, dev)


@pytest.mark.parametrize("D,H,Hkv", [(64, 4, 4), (64, 14, 2), (128, 4, 2), (128, 7, 1), (256, 8, 4),
                                     (256, 2, 1)])
@pytest.mark.parametrize("mode", ["decode", "prefill"])
def test_attention_grid(dev, D, H, Hkv, mode):
    """head_dim 64/128/256 x GQA 1/2/7; windows smaller than n_kv and softcap on alternate shapes."""
    i = [64, 128, 256].index(D) + H
    window, softcap = (37, 20.0) if i % 2 else (0, 0.0)
    if mode == "decode":
        case = attention_case(f"D={D}", 1, 1, 130 + D, H, Hkv, D, 160 + D + 3, window, softcap, seed=i)
    else:
        case = attention_case(f"D={D}", 13, 9, 41, H, Hkv, D, 60, window, softcap, seed=i)
    _check(case, dev)


@pytest.mark.parametrize("D", [64, 256])
def test_attention_prefill_in_16k(dev, D, monkeypatch):
    """WebGPU's minimum 16 KiB of workgroup memory: a smaller flash tile for D = 64, ``main`` for D = 256."""
    monkeypatch.setitem(dev.limits, "max-compute-workgroup-storage-size", 16384)
    assert (prefill_config(D, D, 16384) is None) == (D == 256)
    _check(attention_case(f"D={D} 16k", 40, 37, 30, 4, 2, D, 80, window=50, softcap=20.0, seed=D), dev)


def test_attention_matches_numpy_oracle(dev):
    case = attention_case("oracle", 7, 6, 12, 6, 2, 64, 24, window=9, softcap=15.0, seed=3)
    got = run_op("attention", case.inputs, case.attrs, case.pos, case.n_tokens, dev=dev)[0]
    q, ck, cv = case.inputs
    want = numpy_ops.attention(q, ck, cv, **op_attrs(case.attrs), **numpy_ops.contiguous(case.pos, len(q), len(ck)),
                               n_tokens=case.n_tokens)
    assert rel_error(got, want) < 2e-5


def test_attention_decode_replay_across_positions(dev):
    """One prepared decode plan replayed at growing positions: partials from a longer step never leak."""
    case = attention_case("replay", 1, 1, 300, 8, 2, 64, 320, seed=9)
    p = prepare("attention", case.inputs, case.attrs, dev=dev)
    assert p.kernel.split > 1
    q, ck, cv = case.inputs
    for pos in (299, 0, 77, 5):
        dev.write_params(Params(pos=pos, n_tokens=1))
        dev.submit(p.dispatches)
        got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
        want = numpy_ops.attention(q, ck, cv, **case.attrs, **numpy_ops.contiguous(pos, 1, len(ck)), n_tokens=1)
        assert rel_error(got, want) < 2e-5, pos


def _rounding_values(g: np.random.Generator) -> np.ndarray:
    """f32 values that exercise f32 -> f16 rounding: every halfway point between neighbouring halves (normal
    and subnormal, even and odd low bit) and one f32 step either side of it, random values from 2^-30 to
    2^17, and the edges: zeros, the least subnormal and half of it, 65504, the overflow threshold 65520
    and the f32 value below it, infinities, NaN."""
    h = g.choice(np.arange(0x7BFF, dtype=np.uint16), 1500).view(np.float16)      # finite, not the largest
    mid = ((h.astype(np.float64) + np.nextafter(h, np.float16(np.inf)).astype(np.float64)) / 2).astype(np.float32)
    near = np.concatenate([mid, np.nextafter(mid, np.float32(np.inf)), np.nextafter(mid, np.float32(0))])
    rand = (2.0 ** g.uniform(-30, 17, 2000) * g.standard_normal(2000)).astype(np.float32)
    edges = np.array([0.0, 2.0 ** -24, 2.0 ** -25, 2.0 ** -25 * (1 + 2.0 ** -23), 2.0 ** -14, 65504.0,
                      np.nextafter(np.float32(65520.0), np.float32(0)), 65520.0, 1e9, np.inf, np.nan], np.float32)
    vals = np.concatenate([near, rand, edges])
    vals = np.concatenate([vals, -vals])
    return np.resize(vals, -(-vals.size // 512) * 512)


def test_kv_store_rounds_like_numpy(dev):
    """The f16 caches hold exactly numpy's float16 of every value (round to nearest even, overflow to
    infinity, NaN kept): common/half.wgsl's integer rounding, bit for bit."""
    x = _rounding_values(np.random.default_rng(8)).reshape(-1, 512)
    k, v = x[0::2], x[1::2]
    T = k.shape[0]
    caches = [np.zeros((T, 512), np.float16)] * 2
    got_k, got_v = run_op("kv_store", [k, v, *caches], pos=0, n_tokens=T, dev=dev)
    for src, got in ((k, got_k), (v, got_v)):
        with np.errstate(over="ignore"):
            want = src.astype(np.float16)
        nan = np.isnan(want)
        assert np.array_equal(np.isnan(got), nan)
        bad = np.flatnonzero((got.view(np.uint16) != want.view(np.uint16)) & ~nan)
        assert bad.size == 0, [(float(src.flat[i]), got.flat[i], want.flat[i]) for i in bad[:5]]


def test_cache_kernels_refuse_f32_or_odd_caches(dev):
    """Every kernel that reads or writes the K/V caches names what it needs (f16 or a quantized cache type, rows
    of even widths)."""
    k = np.zeros((1, 6), np.float32)
    with pytest.raises(ValueError, match=r"kv_store: K/V caches must be of \('f16', 'q8_0', 'q4_0'\).*got \['f32'"):
        run_op("kv_store", [k, k, np.zeros((4, 6), np.float32), np.zeros((4, 6), np.float32)], dev=dev)
    odd = np.zeros((1, 5), np.float32)
    with pytest.raises(ValueError, match="with even widths .*widths \\(6, 5\\)"):
        run_op("kv_store", [k, odd, np.zeros((4, 6), np.float16), np.zeros((4, 5), np.float16)], dev=dev)


def test_kv_store_then_attention_chunked_prefill(dev):
    """kv_store + attention on shared cache buffers: a padded 8-row chunk, then a decode step."""
    H, Hkv, D, n_ctx = 4, 2, 64, 32
    g = np.random.default_rng(5)
    ck = np.full((n_ctx, Hkv * D), np.nan, np.float16)
    cv = np.full((n_ctx, Hkv * D), np.nan, np.float16)
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=1 / math.sqrt(D))
    store = prepare("kv_store", [np.zeros((8, Hkv * D), np.float32)] * 2 + [ck, cv], dev=dev)
    k_buf, v_buf, ck_buf, cv_buf = store.in_bufs
    attn = prepare("attention", [np.zeros((8, H * D), np.float32), ck, cv], attrs, dev=dev)
    attn_dispatch = attn.kernel.encode([attn.in_bufs[0], ck_buf, cv_buf, attn.out_bufs[0]])
    ref_k, ref_v = ck.copy(), cv.copy()
    for pos, n in ((0, 8), (8, 5), (13, 1)):
        k = g.standard_normal((8, Hkv * D)).astype(np.float32)
        v = g.standard_normal((8, Hkv * D)).astype(np.float32)
        q = g.standard_normal((8, H * D)).astype(np.float32)
        for buf, a in ((k_buf, k), (v_buf, v), (attn.in_bufs[0], q)):
            dev.write(buf, a)
        dev.write_params(Params(pos=pos, n_tokens=n))
        dev.submit(store.dispatches + attn_dispatch)
        numpy_ops.kv_store(k, v, ref_k, ref_v, **numpy_ops.contiguous(pos, 8, n_ctx), n_tokens=n)
        want = numpy_ops.attention(q, ref_k, ref_v, **attrs, **numpy_ops.contiguous(pos, 8, n_ctx), n_tokens=n)
        got = dev.read(attn.out_bufs[0], np.float32, (8, H * D))
        assert rel_error(got, want) < 2e-5, (pos, n)
        assert np.all(got[n:] == 0)


@pytest.mark.parametrize("qtype,limit", [("Q8_0", 4000), ("Q6_K", 4000), ("F16", 1 << 12)])
def test_embed_split_table(dev, qtype, limit):
    """A table bound in several row ranges (binding limit lowered) gathers the same rows."""
    case = table_case(qtype, 40, 512, 7, 7, seed=3)
    with dev.binding_limit(limit):
        p = prepare("embed", case.inputs, case.attrs, case.in_types, dev)
        assert len(p.dispatches) > 1
        dev.write_params(Params(pos=0, n_tokens=7))
        dev.submit(p.dispatches)
    got = dev.read(p.out_bufs[0], np.float32, p.out_shapes[0])
    assert rel_error(got, case.reference()[0]) < 1e-6


def test_rms_norm_without_subgroups(dev, monkeypatch):
    without_subgroups(monkeypatch)
    for case in CHECKS["rms_norm"]():
        _check(case, dev)


def test_oracle_parity_rope_norm_glu(dev):
    """The numpy backend's ops agree with the kernels (the graph-level parity relies on it)."""
    g = np.random.default_rng(8)
    x = g.standard_normal((5, 6 * 128)).astype(np.float32)
    a = dict(n_head=6, head_dim=128, n_rot=96, base=1e6, neox=True, freq_scale=1.0)
    got = run_op("rope", [x], a, pos=4000, dev=dev)[0]
    assert rel_error(got, numpy_ops.rope(x, np.arange(4000, 4005, dtype=np.int32), **a)) < 2e-6
    w = g.standard_normal(128).astype(np.float32)
    got = run_op("rms_norm", [x, w], {"eps": 1e-6, "group": 128}, dev=dev)[0]
    assert rel_error(got, numpy_ops.rms_norm(x, w, eps=1e-6, group=128)) < 2e-6
    for act in ("silu", "gelu_tanh"):
        got = run_op("glu", [x * 8, x], {"act": act}, dev=dev)[0]
        assert rel_error(got, numpy_ops.glu(x * 8, x, act=act)) < 2e-6
