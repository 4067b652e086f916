"""Each numpy reference op against an independent float64 loop implementation, at awkward shapes.

Error measure: max |ours - ref| / max |ref| (relative to the output's scale). Bounds: 1e-5 for ops that
accumulate (matmul, norms, attention), 2e-6 for elementwise ones. Inputs are random normals (never zeros);
padded rows hold large garbage so any leak into valid rows shows.
"""
from __future__ import annotations

import math

import numpy as np
import pytest

from oxigpu.backends import numpy_ops as ops

rng = np.random.default_rng(0)


def rand(*shape, scale=1.0) -> np.ndarray:
    return (rng.standard_normal(shape) * scale).astype(np.float32)


def rel_err(ours: np.ndarray, ref: np.ndarray) -> float:
    assert ours.dtype == np.float32 and ours.shape == ref.shape
    return float(np.abs(ours.astype(np.float64) - ref).max() / np.abs(ref).max())


@pytest.mark.parametrize("T,n,scale", [(5, 3, 1.0), (1, 1, 25.3), (7, 7, 0.5)])
def test_embed(T, n, scale):
    table = rand(11, 13)
    ids = rng.integers(0, 11, T).astype(np.int32)
    ids[n:] = 10_000  # padding ids may be garbage: they must never be read
    ref = np.zeros((T, 13))
    for t in range(n):
        ref[t] = [float(table[ids[t], c]) * scale for c in range(13)]
    assert rel_err(ops.embed(ids, table, scale=scale, n_tokens=n), ref) < 2e-6


@pytest.mark.parametrize("R,n,group", [(3, 40, 40), (2, 24, 6), (1, 640, 640), (4, 1000, 125)])
def test_rms_norm(R, n, group):
    x, w, eps = rand(R, n, scale=3.0), rand(group), 1e-6
    ref = np.empty((R, n))
    for r in range(R):
        for g0 in range(0, n, group):
            seg = [float(v) for v in x[r, g0:g0 + group]]
            inv = 1.0 / math.sqrt(sum(v * v for v in seg) / group + eps)
            ref[r, g0:g0 + group] = [v * inv * float(w[i]) for i, v in enumerate(seg)]
    assert rel_err(ops.rms_norm(x, w, eps=eps, group=group), ref) < 1e-5


@pytest.mark.parametrize("R,k,n,bias", [(1, 37, 19, False), (1, 64, 50, True), (6, 33, 17, True),
                                        (5, 130, 3, False)])
def test_matmul(R, k, n, bias):
    x, w = rand(R, k), rand(n, k)
    b = rand(n) if bias else None
    ref = np.empty((R, n))
    for r in range(R):
        for o in range(n):
            ref[r, o] = sum(float(x[r, i]) * float(w[o, i]) for i in range(k)) + (float(b[o]) if bias else 0.0)
    assert rel_err(ops.matmul(x, w, b), ref) < 1e-5


def _rope_ref(x, n_head, head_dim, n_rot, base, neox, freq_scale, pos, ff=None):
    T = x.shape[0]
    out = x.astype(np.float64).copy()
    for t in range(T):
        p = pos + t
        for h in range(n_head):
            row = x[t, h * head_dim:(h + 1) * head_dim].astype(np.float64)
            for i in range(n_rot // 2):
                theta = p * freq_scale * base ** (-2.0 * i / n_rot)
                if ff is not None:
                    theta /= float(ff[i])
                a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
                c, s = math.cos(theta), math.sin(theta)
                out[t, h * head_dim + a] = row[a] * c - row[b] * s
                out[t, h * head_dim + b] = row[a] * s + row[b] * c
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("T,n_head,head_dim,n_rot,base,freq_scale,pos", [
    (3, 2, 8, 8, 10000.0, 1.0, 0),
    (5, 3, 12, 8, 1e6, 1.0, 37),       # partial rotary: dims 8..11 pass through
    (2, 1, 6, 4, 500000.0, 0.25, 511),  # linear scaling
])
def test_rope(neox, T, n_head, head_dim, n_rot, base, freq_scale, pos):
    x = rand(T, n_head * head_dim)
    ours = ops.rope(x, n_head=n_head, head_dim=head_dim, n_rot=n_rot, base=base, neox=neox,
                    freq_scale=freq_scale, pos=pos)
    assert rel_err(ours, _rope_ref(x, n_head, head_dim, n_rot, base, neox, freq_scale, pos)) < 2e-6


def test_rope_freq_factors():
    x, ff = rand(4, 2 * 16), (1.0 + rng.random(8) * 7).astype(np.float32)
    ours = ops.rope(x, ff, n_head=2, head_dim=16, n_rot=16, base=500000.0, neox=False, pos=100)
    assert rel_err(ours, _rope_ref(x, 2, 16, 16, 500000.0, False, 1.0, 100, ff)) < 2e-6


def test_kv_store_writes_only_valid_rows():
    K, V = rand(10, 6), rand(10, 4)
    K0, V0 = K.copy(), V.copy()
    k, v = rand(4, 6), rand(4, 4)
    ops.kv_store(k, v, K, V, pos=5, n_tokens=3)
    np.testing.assert_array_equal(K[5:8], k[:3])
    np.testing.assert_array_equal(V[5:8], v[:3])
    np.testing.assert_array_equal(np.delete(K, [5, 6, 7], 0), np.delete(K0, [5, 6, 7], 0))
    np.testing.assert_array_equal(np.delete(V, [5, 6, 7], 0), np.delete(V0, [5, 6, 7], 0))


def _attention_ref(q, K, V, H, Hkv, D, Dv, scale, window, softcap, pos, n):
    out = np.zeros((q.shape[0], H * Dv))
    for t in range(n):
        p = pos + t
        for h in range(H):
            kvh = h // (H // Hkv)
            js = [j for j in range(p + 1) if window == 0 or j > p - window]
            scores = []
            for j in js:
                s = scale * sum(float(q[t, h * D + d]) * float(K[j, kvh * D + d]) for d in range(D))
                scores.append(softcap * math.tanh(s / softcap) if softcap else s)
            m = max(scores)
            e = [math.exp(s - m) for s in scores]
            z = sum(e)
            for d in range(Dv):
                out[t, h * Dv + d] = sum(e[i] / z * float(V[j, kvh * Dv + d]) for i, j in enumerate(js))
    return out


@pytest.mark.parametrize("T,n,pos,H,Hkv,D,Dv,window,softcap", [
    (1, 1, 0, 2, 2, 8, 8, 0, 0.0),      # first token
    (1, 1, 9, 4, 1, 6, 6, 0, 0.0),      # decode, MQA
    (5, 3, 7, 6, 2, 5, 7, 0, 0.0),      # padded chunk, GQA, Dv != D
    (4, 4, 6, 4, 2, 8, 8, 3, 0.0),      # sliding window inside the chunk and the cache
    (3, 2, 4, 2, 1, 4, 4, 0, 5.0),      # logit softcap
    (6, 6, 0, 3, 3, 4, 4, 2, 30.0),     # window + softcap from position 0
])
def test_attention(T, n, pos, H, Hkv, D, Dv, window, softcap):
    n_ctx = 16
    q, K, V = rand(T, H * D, scale=2.0), rand(n_ctx, Hkv * D, scale=2.0), rand(n_ctx, Hkv * Dv)
    q[n:] = 1e4  # padded query rows: garbage
    K[pos + n:] = 1e4  # rows after the chunk: never written yet, must not be seen
    ours = ops.attention(q, K, V, n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=Dv, scale=D ** -0.5,
                         window=window, softcap=softcap, pos=pos, n_tokens=n)
    ref = _attention_ref(q, K, V, H, Hkv, D, Dv, D ** -0.5, window, softcap, pos, n)
    assert rel_err(ours, ref) < 1e-5


def test_add():
    a, b = rand(3, 7), rand(3, 7)
    ref_add = np.array([[float(a[i, j]) + float(b[i, j]) for j in range(7)] for i in range(3)])
    assert rel_err(ops.add(a, b), ref_add) < 2e-7


@pytest.mark.parametrize("act", ["silu", "gelu_tanh"])
def test_glu(act):
    gate, up = rand(3, 37, scale=4.0), rand(3, 37)
    gate[0, :3] = [-120.0, 95.0, -30.0]  # far tails: silu must not overflow

    def f(x: float) -> float:
        if act == "silu":
            return x / (1.0 + math.exp(-x)) if x > -700 else 0.0
        return 0.5 * x * (1.0 + math.tanh(math.sqrt(2.0 / math.pi) * (x + 0.044715 * x ** 3)))
    ref = np.array([[f(float(gate[i, j])) * float(up[i, j]) for j in range(37)] for i in range(3)])
    with np.errstate(all="raise"):
        ours = ops.glu(gate, up, act=act)
    assert rel_err(ours, ref) < 2e-6


def test_last_row():
    x = rand(5, 9)
    np.testing.assert_array_equal(ops.last_row(x, n_tokens=3), x[2:3])
