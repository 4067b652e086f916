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


def _rope_ref(x, n_head, head_dim, n_rot, base, neox, freq_scale, positions, ff=None):
    out = x.astype(np.float64).copy()
    for t, p in enumerate(positions):
        for h in range(n_head):
            row = x[t, h * head_dim:(h + 1) * head_dim].astype(np.float64)
            for i in range(n_rot // 2):
                theta = int(p) * freq_scale * base ** (-2.0 * i / n_rot)
                if ff is not None:
                    theta /= float(ff[i])
                a, b = (i, i + n_rot // 2) if neox else (2 * i, 2 * i + 1)
                c, s = math.cos(theta), math.sin(theta)
                out[t, h * head_dim + a] = row[a] * c - row[b] * s
                out[t, h * head_dim + b] = row[a] * s + row[b] * c
    return out


@pytest.mark.parametrize("neox", [False, True])
@pytest.mark.parametrize("T,n_head,head_dim,n_rot,base,freq_scale,positions", [
    (3, 2, 8, 8, 10000.0, 1.0, [0, 1, 2]),
    (5, 3, 12, 8, 1e6, 1.0, [37, 38, 3, 0, 4000]),   # partial rotary (dims 8..11 pass through); rows of
    (2, 1, 6, 4, 500000.0, 0.25, [511, 7]),            # several sequences; linear scaling
])
def test_rope(neox, T, n_head, head_dim, n_rot, base, freq_scale, positions):
    x = rand(T, n_head * head_dim)
    pos = np.asarray(positions, np.int32)
    ours = ops.rope(x, pos, n_head=n_head, head_dim=head_dim, n_rot=n_rot, base=base, neox=neox,
                    freq_scale=freq_scale)
    assert rel_err(ours, _rope_ref(x, n_head, head_dim, n_rot, base, neox, freq_scale, positions)) < 2e-6


def test_rope_freq_factors():
    x, ff = rand(4, 2 * 16), (1.0 + rng.random(8) * 7).astype(np.float32)
    pos = np.arange(100, 104, dtype=np.int32)
    ours = ops.rope(x, pos, ff, n_head=2, head_dim=16, n_rot=16, base=500000.0, neox=False)
    assert rel_err(ours, _rope_ref(x, 2, 16, 16, 500000.0, False, 1.0, pos, ff)) < 2e-6


B = 4   # block size of the paged tests: small, so a few tokens span several blocks


def paged_step(lengths: list[int], news: list[int], n_blocks: int, seed: int = 0):
    """Rows of len(lengths) sequences: sequence s has lengths[s] tokens cached and news[s] new rows at the
    positions after them; blocks handed out from a shuffled pool. Returns positions, row_seq, block_table."""
    g = np.random.default_rng(seed)
    pool = list(g.permutation(n_blocks))
    mb = max(-(-(l + n) // B) for l, n in zip(lengths, news)) + 1
    table = np.zeros((len(lengths), mb), np.int32)
    for s, (l, n) in enumerate(zip(lengths, news)):
        for j in range(-(-(l + n) // B)):
            table[s, j] = pool.pop()
    positions = np.concatenate([np.arange(l, l + n) for l, n in zip(lengths, news)]).astype(np.int32)
    row_seq = np.repeat(np.arange(len(lengths)), news).astype(np.int32)
    return positions, row_seq, table


def test_kv_store_writes_only_valid_rows_at_their_blocks():
    n_blocks = 12
    positions, row_seq, table = paged_step([5, 0, 9], [2, 3, 1], n_blocks)
    T = len(positions) + 2                                # two padded rows
    positions = np.append(positions, [0, 0]).astype(np.int32)
    row_seq = np.append(row_seq, [0, 0]).astype(np.int32)
    K, V = rand(n_blocks * B, 6), rand(n_blocks * B, 4)
    K0, V0 = K.copy(), V.copy()
    k, v = rand(T, 6), rand(T, 4)
    ops.kv_store(k, v, K, V, positions, row_seq, table, block_size=B, n_tokens=T - 2)
    rows = [table[s, p // B] * B + p % B for p, s in zip(positions[:T - 2], row_seq[:T - 2])]
    np.testing.assert_array_equal(K[rows], k[:T - 2])
    np.testing.assert_array_equal(V[rows], v[:T - 2])
    np.testing.assert_array_equal(np.delete(K, rows, 0), np.delete(K0, rows, 0))
    np.testing.assert_array_equal(np.delete(V, rows, 0), np.delete(V0, rows, 0))


def _attention_ref(q, K, V, H, Hkv, D, Dv, scale, window, softcap, positions, n):
    """float64 attention of query rows 0..n-1 at ``positions`` over contiguous caches (logical rows)."""
    out = np.zeros((q.shape[0], H * Dv))
    for t in range(n):
        p = int(positions[t])
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
    """One sequence through the identity block table (a contiguous cache)."""
    n_ctx = 16
    q, K, V = rand(T, H * D, scale=2.0), rand(n_ctx, Hkv * D, scale=2.0), rand(n_ctx, Hkv * Dv)
    q[n:] = 1e4  # padded query rows: garbage
    K[pos + n:] = 1e4  # rows after the chunk: never written yet, must not be seen
    positions = np.append(np.arange(pos, pos + n), np.zeros(T - n)).astype(np.int32)
    table = np.arange(n_ctx // B, dtype=np.int32)[None, :]
    ours = ops.attention(q, K, V, positions, np.zeros(T, np.int32), table, n_head=H, n_head_kv=Hkv, head_dim=D,
                         v_head_dim=Dv, scale=D ** -0.5, window=window, softcap=softcap, block_size=B, n_tokens=n)
    ref = _attention_ref(q, K, V, H, Hkv, D, Dv, D ** -0.5, window, softcap, positions, n)
    assert rel_err(ours, ref) < 1e-5


@pytest.mark.parametrize("window,softcap", [(0, 0.0), (3, 0.0), (0, 10.0)])
def test_attention_of_several_sequences_through_their_block_tables(window, softcap):
    """Decode rows and prefill chunks of four sequences in one step, their blocks scattered over the pool:
    each query row equals the attention of its own sequence alone over a contiguous cache; rows of other
    sequences, blocks of the pool nobody owns and padded rows are never seen."""
    H, Hkv, D, Dv, n_blocks = 4, 2, 6, 5, 24
    lengths, news = [7, 0, 12, 3], [1, 5, 1, 6]
    positions, row_seq, table = paged_step(lengths, news, n_blocks, seed=3)
    n = len(positions)
    T = n + 3
    positions = np.append(positions, [0] * 3).astype(np.int32)
    row_seq = np.append(row_seq, [0] * 3).astype(np.int32)
    q = rand(T, H * D, scale=2.0)
    q[n:] = 1e4
    K = np.full((n_blocks * B, Hkv * D), 1e4, np.float32)   # unowned rows: poison
    V = np.full((n_blocks * B, Hkv * Dv), 1e4, np.float32)
    logical = {}
    for s, (l, m) in enumerate(zip(lengths, news)):
        ks, vs = rand(l + m, Hkv * D, scale=2.0), rand(l + m, Hkv * Dv)
        for j in range(l + m):
            K[table[s, j // B] * B + j % B], V[table[s, j // B] * B + j % B] = ks[j], vs[j]
        logical[s] = ks, vs
    ours = ops.attention(q, K, V, positions, row_seq, table, n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=Dv,
                         scale=D ** -0.5, window=window, softcap=softcap, block_size=B, n_tokens=n)
    assert not ours[n:].any()
    for s in range(len(lengths)):
        rows = np.flatnonzero(row_seq[:n] == s)
        ks, vs = logical[s]
        ref = _attention_ref(q[rows], ks, vs, H, Hkv, D, Dv, D ** -0.5, window, softcap, positions[rows], len(rows))
        assert rel_err(ours[rows], ref) < 1e-5


def test_gather_rows():
    x = rand(7, 9)
    rows = np.array([2, 6, 0, 0], np.int32)
    out = ops.gather_rows(x, rows, n_seqs=3)
    np.testing.assert_array_equal(out[:3], x[[2, 6, 0]])
    assert out.shape == (4, 9) and not out[3].any()


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
