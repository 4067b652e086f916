"""float32 numpy reference of every op in the IR catalogue (see ``oxigpu/graph/ir.py``).

These functions define the ops' semantics: the numpy backend runs them and every WGSL kernel is tested
against them. Each takes the node's input arrays positionally (in IR order: the step inputs ``positions``,
``row_seq``, ``block_table`` and ``rows`` are inputs like any other), then its attrs as keywords and, where
the op depends on the step, the step parameters ``n_tokens`` (valid rows; rows past it are padding) and
``n_seqs`` (valid sequence slots) as keywords, so a caller can always invoke
``op(*inputs, **node.attrs, n_tokens=..., n_seqs=...)`` (passing only the step params the op takes).
All return new float32 arrays, except ``kv_store`` which writes the cache state in place (that is its
meaning; so do the fused ``rope_kv_store`` and ``rope_kv_attention``). Padded rows come out as zeros where
an op would otherwise read out of range (``embed``, ``attention``, ``gather_rows``) and from the matmuls
(which skip them); elsewhere they are computed like any row and ignored downstream.

The paged KV cache (graph/ir.py): logical row j of the sequence in slot s is physical row
``block_table[s, j // block_size] * block_size + j % block_size`` of each layer's cache.
"""
from __future__ import annotations

import functools
import math

import numpy as np

from ..quant import kvcache as kvq

F32 = np.float32


def embed(ids: np.ndarray, table, *, scale: float = 1.0, n_tokens: int | None = None) -> np.ndarray:
    """Rows ``table[ids[t]] * scale`` for ``t < n_tokens``, zero rows after.

    ``table`` is anything indexable by an id array: a float32 matrix, or a backend's row-dequantizer.
    """
    n = len(ids) if n_tokens is None else n_tokens
    rows = np.asarray(table[np.asarray(ids[:n], dtype=np.int64)], dtype=F32)
    out = np.zeros((len(ids), rows.shape[1]), F32)
    out[:n] = rows * F32(scale) if scale != 1.0 else rows
    return out


def rms_norm(x: np.ndarray, w: np.ndarray, *, eps: float, group: int) -> np.ndarray:
    """``x / sqrt(mean(x^2) + eps) * w`` over each run of ``group`` columns (group == cols: whole row;
    group == head_dim: per-head norms as in qwen3/gemma3 Q/K norms)."""
    xs = x.reshape(x.shape[0], -1, group)
    ms = np.einsum("rhg,rhg->rh", xs, xs)[..., None] * F32(1.0 / group)  # (vecdot needs numpy 2)
    ms += F32(eps)
    y = xs / np.sqrt(ms)
    y *= w
    return y.reshape(x.shape)


def rms_norm_add(x: np.ndarray, w: np.ndarray, res: np.ndarray, *, eps: float, group: int) -> np.ndarray:
    """``add(res, rms_norm(x, w))`` in one op (a block's post-norm with its residual add)."""
    return res + rms_norm(x, w, eps=eps, group=group)


def matmul(x: np.ndarray, w: np.ndarray, bias: np.ndarray | None = None, *,
           out: np.ndarray | None = None, n_tokens: int | None = None) -> np.ndarray:
    """``x @ w.T (+ bias)`` with ``w`` as ``[n_out, n_in]``; one row goes through BLAS gemv.

    ``out`` (optional, float32 ``[rows, n_out]``) receives the result instead of a new array, so the
    backend can write straight into its arena without a per-step allocation. Rows from ``n_tokens`` on are
    padding (a step's padded rows; gathered rows past n_seqs, which never exceeds n_tokens): not multiplied,
    set to zero, so a mostly-padded step costs what its valid rows cost and padding stays finite.
    """
    if out is None:
        out = np.empty((x.shape[0], w.shape[0]), F32)
    rows = x.shape[0] if n_tokens is None else min(n_tokens, x.shape[0])
    if rows == 1:
        np.matmul(w, x[0], out=out[0])
    else:
        np.matmul(x[:rows], w.T, out=out[:rows])
    out[rows:] = 0
    if bias is not None:
        out[:rows] += bias
    return out


def matmul_add(x: np.ndarray, w: np.ndarray, res: np.ndarray, bias: np.ndarray | None = None, *,
               out: np.ndarray | None = None, n_tokens: int | None = None) -> np.ndarray:
    """``add(res, matmul(x, w, bias))`` in one op (the residual add as the matmul's epilogue)."""
    out = matmul(x, w, bias, out=out, n_tokens=n_tokens)
    out += res
    return out


def _prologue(x: np.ndarray, rest: tuple[np.ndarray, ...], norm_eps: float | None
              ) -> tuple[np.ndarray, tuple[np.ndarray, ...]]:
    """With ``norm_eps``, the last input is a norm weight: ``rms_norm(x)`` and the other inputs."""
    if norm_eps is None:
        return x, rest
    return rms_norm(x, rest[-1], eps=norm_eps, group=x.shape[1]), rest[:-1]


def matmul_multi(x: np.ndarray, *ws_and_biases: np.ndarray, n_w: int, norm_eps: float | None = None,
                 out: tuple[np.ndarray, ...] | None = None, n_tokens: int | None = None) -> tuple[np.ndarray, ...]:
    """``matmul(x, w_i, bias_i)`` for each of the ``n_w`` weights sharing the input x (q/k/v, gate/up);
    biases, when present, follow the weights; with ``norm_eps``, x is ``rms_norm(x, w_norm)`` first
    (``w_norm`` the last input)."""
    x, ws_and_biases = _prologue(x, ws_and_biases, norm_eps)
    ws, bs = ws_and_biases[:n_w], ws_and_biases[n_w:] or (None,) * n_w
    outs = out if out is not None else (None,) * n_w
    return tuple(matmul(x, w, b, out=o, n_tokens=n_tokens) for w, b, o in zip(ws, bs, outs))


def rope_angles(positions: np.ndarray, n_rot: int, base: float, freq_scale: float = 1.0,
                freq_factors: np.ndarray | None = None) -> tuple[np.ndarray, np.ndarray]:
    """cos, sin ``[T, n_rot/2]`` of ``theta_i = p * freq_scale * base^(-2i/n_rot) / ff_i`` for each row's
    position p, computed in float64. Memoized: every layer's q and k share them within a step."""
    ff = None if freq_factors is None else np.asarray(freq_factors, np.float32).tobytes()
    return _rope_angles(np.asarray(positions, np.int64).tobytes(), n_rot, float(base), float(freq_scale), ff)


@functools.lru_cache(maxsize=16)
def _rope_angles(positions: bytes, n_rot: int, base: float, freq_scale: float,
                 ff: bytes | None) -> tuple[np.ndarray, np.ndarray]:
    inv = base ** (-np.arange(0, n_rot, 2, dtype=np.float64) / n_rot)
    if ff is not None:
        inv = inv / np.frombuffer(ff, np.float32).astype(np.float64)
    theta = np.frombuffer(positions, np.int64).astype(np.float64)[:, None] * (freq_scale * inv)[None, :]
    cos, sin = np.cos(theta).astype(F32), np.sin(theta).astype(F32)
    cos.flags.writeable = sin.flags.writeable = False
    return cos, sin


def rope(x: np.ndarray, positions: np.ndarray, freq_factors: np.ndarray | None = None, *, n_head: int,
         head_dim: int, n_rot: int, base: float, neox: bool, freq_scale: float = 1.0) -> np.ndarray:
    """Rotary embedding of each head's first ``n_rot`` dims (the rest pass through); row t is at position
    ``positions[t]``. Normal mode rotates pairs (2i, 2i+1); NEOX rotates (i, i + n_rot/2)."""
    T = x.shape[0]
    cos, sin = rope_angles(positions, n_rot, base, freq_scale, freq_factors)
    cos, sin = cos[:, None, :], sin[:, None, :]
    xh = x.reshape(T, n_head, head_dim)
    out = xh.copy()
    half = n_rot // 2
    ia, ib = (slice(0, half), slice(half, n_rot)) if neox else (slice(0, n_rot, 2), slice(1, n_rot, 2))
    a, b = xh[..., ia], xh[..., ib]
    out[..., ia] = a * cos - b * sin
    out[..., ib] = a * sin + b * cos
    return out.reshape(x.shape)


def cache_kind(cache: np.ndarray, width: int) -> str:
    """The KV-cache type of a state array: float rows hold values ("f16": the backends' float16; a float32
    cache, as some checks pass, stores unrounded), uint8 rows ggml blocks (quant/kvcache.py), told apart by
    their bytes per row."""
    if cache.dtype.kind == "f":
        return "f16"
    for kind in kvq.KV_TYPES[1:]:
        if cache.shape[1] == kvq.row_bytes(kind, width):
            return kind
    raise ValueError(f"a cache of {cache.shape[1]} bytes per row holds no KV type of {width} values")


def read_cache(cache: np.ndarray, rows: np.ndarray, width: int) -> np.ndarray:
    """Rows ``rows`` of a KV cache as the values it holds (f16, or dequantized blocks)."""
    kind = cache_kind(cache, width)
    return cache[rows] if kind == "f16" else kvq.dequantize_rows(cache[rows], kind, width)


def physical_rows(seq: int, logical: np.ndarray, block_table: np.ndarray, block_size: int) -> np.ndarray:
    """Cache rows of slot ``seq``'s logical rows ``logical`` through its block table."""
    return block_table[seq, logical // block_size].astype(np.int64) * block_size + logical % block_size


def contiguous(pos: int, T: int, n_ctx: int) -> dict[str, np.ndarray | int]:
    """The paged inputs and ``block_size`` (keywords for ``kv_store``, ``attention`` and the fused ops) of one
    sequence whose T rows are at positions ``pos ..`` and whose cache row j is logical row j (blocks of one
    row, the identity table): a contiguous cache of ``n_ctx`` rows, as kernel checks build them."""
    return {"positions": np.arange(pos, pos + T, dtype=np.int32), "row_seq": np.zeros(T, np.int32),
            "block_table": np.arange(n_ctx, dtype=np.int32)[None, :], "block_size": 1}


def kv_store(k: np.ndarray, v: np.ndarray, cache_k: np.ndarray, cache_v: np.ndarray, positions: np.ndarray,
             row_seq: np.ndarray, block_table: np.ndarray, *, block_size: int, n_tokens: int) -> None:
    """Write valid row t's k and v at logical position ``positions[t]`` of slot ``row_seq[t]`` (in place),
    rounded to the caches' dtype (float16: to nearest even; q8_0 / q4_0: ggml's blocks, quant/kvcache.py)."""
    n = n_tokens
    phys = block_table[row_seq[:n], positions[:n] // block_size].astype(np.int64) * block_size \
        + positions[:n] % block_size
    for cache, x in ((cache_k, k), (cache_v, v)):
        kind = cache_kind(cache, x.shape[1])
        cache[phys] = x[:n] if kind == "f16" else kvq.quantize_rows(x[:n], kind)


def rope_kv_store(q: np.ndarray, k: np.ndarray, v: np.ndarray, cache_k: np.ndarray, cache_v: np.ndarray,
                  positions: np.ndarray, row_seq: np.ndarray, block_table: np.ndarray,
                  freq_factors: np.ndarray | None = None, *, n_head: int, n_head_kv: int, head_dim: int,
                  n_rot: int, base: float, neox: bool, freq_scale: float = 1.0, block_size: int,
                  n_tokens: int) -> np.ndarray:
    """``kv_store(rope(k), v, ...)`` then ``rope(q)`` (returned): both ropes share every attr but n_head."""
    ra = dict(head_dim=head_dim, n_rot=n_rot, base=base, neox=neox, freq_scale=freq_scale)
    kv_store(rope(k, positions, freq_factors, n_head=n_head_kv, **ra), v, cache_k, cache_v, positions, row_seq,
             block_table, block_size=block_size, n_tokens=n_tokens)
    return rope(q, positions, freq_factors, n_head=n_head, **ra)


def attention(q: np.ndarray, cache_k: np.ndarray, cache_v: np.ndarray, positions: np.ndarray,
              row_seq: np.ndarray, block_table: np.ndarray, *, n_head: int, n_head_kv: int, head_dim: int,
              v_head_dim: int, scale: float, window: int = 0, softcap: float = 0.0, block_size: int,
              n_tokens: int) -> np.ndarray:
    """Causal softmax attention of the step's queries, each over its own sequence's cached keys.

    Query row t (slot s = row_seq[t], position p = positions[t]) sees the logical keys j of slot s with
    j <= p and, when ``window`` > 0, j > p - window, read through s's block table. Scores are
    ``scale * q.k``, then ``softcap * tanh(s / softcap)`` when softcap > 0, then masked softmax. Query head h
    reads KV head ``h // (n_head / n_head_kv)`` (GQA/MQA). Padded query rows (t >= n_tokens) are zero. The
    math runs in q's precision whatever the caches store (float16 caches are widened, quantized ones
    dequantized).
    """
    T, n, g = q.shape[0], n_tokens, n_head // n_head_kv
    out = np.zeros((T, n_head * v_head_dim), F32)
    seqs, pos = row_seq[:n], positions[:n].astype(np.int64)
    for s in np.unique(seqs):
        rows = np.flatnonzero(seqs == s)
        p = pos[rows]
        lo = max(0, int(p.min()) + 1 - window) if window else 0
        j = np.arange(lo, int(p.max()) + 1)
        phys = physical_rows(int(s), j, block_table, block_size)
        ck, cv = (read_cache(c, phys, w).astype(q.dtype, copy=False)
                  for c, w in ((cache_k, n_head_kv * head_dim), (cache_v, n_head_kv * v_head_dim)))
        m = len(rows)
        qh = q[rows].reshape(m, n_head_kv, g, head_dim).transpose(1, 2, 0, 3)         # [Hkv, g, m, D]
        kh = ck.reshape(len(j), n_head_kv, head_dim).transpose(1, 2, 0)              # [Hkv, D, L]
        vh = cv.reshape(len(j), n_head_kv, v_head_dim).transpose(1, 0, 2)            # [Hkv, L, Dv]
        sc = np.matmul(qh, kh[:, None]) * F32(scale)                                 # [Hkv, g, m, L]
        if softcap:
            sc = np.tanh(sc * F32(1.0 / softcap)) * F32(softcap)
        visible = j[None, :] <= p[:, None]
        if window:
            visible &= j[None, :] > p[:, None] - window
        sc = np.where(visible, sc, F32(-np.inf))
        sc = np.exp(sc - sc.max(axis=-1, keepdims=True))
        sc /= sc.sum(axis=-1, keepdims=True)
        o = np.matmul(sc, vh[:, None])                                               # [Hkv, g, m, Dv]
        out[rows] = o.transpose(2, 0, 1, 3).reshape(m, n_head * v_head_dim)
    return out


def rope_kv_attention(q: np.ndarray, k: np.ndarray, v: np.ndarray, cache_k: np.ndarray, cache_v: np.ndarray,
                      positions: np.ndarray, row_seq: np.ndarray, block_table: np.ndarray,
                      *extra: np.ndarray, n_head: int, n_head_kv: int, head_dim: int,
                      n_rot: int, base: float, neox: bool, freq_scale: float = 1.0, v_head_dim: int,
                      scale: float, window: int = 0, softcap: float = 0.0, block_size: int,
                      n_tokens: int, qk_norm_eps: float | None = None) -> np.ndarray:
    """``attention(rope_kv_store(q, k, v, ...), cache_k, cache_v, ...)``: a decode layer's rope, cache write
    and attention as one op (the caches are written in place). ``extra``: freq_factors if given, then with
    ``qk_norm_eps`` the per-head norm weights of q and k (q, k = their rms_norm first)."""
    if qk_norm_eps is not None:
        *extra, q_norm, k_norm = extra
        q = rms_norm(q, q_norm, eps=qk_norm_eps, group=head_dim)
        k = rms_norm(k, k_norm, eps=qk_norm_eps, group=head_dim)
    freq_factors = extra[0] if extra else None
    paged = (positions, row_seq, block_table)
    qr = rope_kv_store(q, k, v, cache_k, cache_v, *paged, freq_factors, n_head=n_head, n_head_kv=n_head_kv,
                       head_dim=head_dim, n_rot=n_rot, base=base, neox=neox, freq_scale=freq_scale,
                       block_size=block_size, n_tokens=n_tokens)
    return attention(qr, cache_k, cache_v, *paged, n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim,
                     v_head_dim=v_head_dim, scale=scale, window=window, softcap=softcap, block_size=block_size,
                     n_tokens=n_tokens)


def add(a: np.ndarray, b: np.ndarray) -> np.ndarray:
    return a + b


_GELU_C = F32(math.sqrt(2.0 / math.pi))


def glu(gate: np.ndarray, up: np.ndarray, *, act: str) -> np.ndarray:
    """``act(gate) * up``; silu(x) = x * sigmoid(x), written with tanh so it never overflows;
    gelu_tanh(x) = 0.5 x (1 + tanh(sqrt(2/pi) (x + 0.044715 x^3)))."""
    if act == "silu":
        a = gate * (F32(0.5) + F32(0.5) * np.tanh(F32(0.5) * gate))
    elif act == "gelu_tanh":
        a = F32(0.5) * gate * (F32(1.0) + np.tanh(_GELU_C * (gate + F32(0.044715) * gate * gate * gate)))
    else:
        raise ValueError(f"glu: unknown activation {act!r}")
    return a * up


def matmul_glu(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, *norm_w: np.ndarray, act: str,
               norm_eps: float | None = None, n_tokens: int | None = None) -> np.ndarray:
    """``glu(matmul(x, w_gate), matmul(x, w_up), act)`` in one op (the activation as the GEMV's epilogue);
    with ``norm_eps``, x is ``rms_norm(x, norm_w)`` first."""
    x, _ = _prologue(x, norm_w, norm_eps)
    return glu(matmul(x, w_gate, n_tokens=n_tokens), matmul(x, w_up, n_tokens=n_tokens), act=act)


def gather_rows(x: np.ndarray, rows: np.ndarray, *, n_seqs: int) -> np.ndarray:
    """Row ``s`` is ``x[rows[s]]`` for the valid slots ``s < n_seqs`` (each sequence's last row: its
    logits), zero rows after."""
    out = np.zeros((len(rows), x.shape[1]), F32)
    out[:n_seqs] = x[rows[:n_seqs]]
    return out


def split(x: np.ndarray, *, sizes: tuple[int, ...]) -> tuple[np.ndarray, ...]:
    """Consecutive column blocks of widths ``sizes`` (a fused projection's q/k/v or gate/up)."""
    ends = np.cumsum(sizes)
    return tuple(np.ascontiguousarray(x[:, e - n:e]) for n, e in zip(sizes, ends))


def scale(x: np.ndarray, *, scale: float, softcap: float = 0.0) -> np.ndarray:
    """``y = x * scale``, then ``softcap * tanh(y / softcap)`` when softcap > 0."""
    y = x * F32(scale)
    if softcap:
        y = np.tanh(y * F32(1.0 / softcap)) * F32(softcap)
    return y


def act(x: np.ndarray, *, act: str) -> np.ndarray:
    """An ungated activation (``glu`` without the up factor)."""
    if act != "gelu_tanh":
        raise ValueError(f"act: unknown activation {act!r}")
    return F32(0.5) * x * (F32(1.0) + np.tanh(_GELU_C * (x + F32(0.044715) * x * x * x)))


MOE_MIN_SUM = 6.103515625e-5
"""Smallest sum a renormalization divides by (llama.cpp clamps to the least normal f16)."""


def moe_gate(logits: np.ndarray, *, k: int, norm: bool, w_scale: float = 1.0,
             n_tokens: int) -> tuple[np.ndarray, np.ndarray]:
    """Top-``k`` experts of ``softmax(logits)`` per row (largest first, ties to the lower id) and their
    probabilities (renormalized with ``norm``, times ``w_scale``). Padded rows get expert 0, weight 0."""
    T = logits.shape[0]
    ids, w = np.zeros((T, k), np.int32), np.zeros((T, k), F32)
    x = logits[:n_tokens]
    order = np.argsort(-x, axis=1, kind="stable")[:, :k]
    p = np.exp(x - x.max(axis=1, keepdims=True))
    p /= p.sum(axis=1, keepdims=True)
    sel = np.take_along_axis(p, order, 1)
    if norm:
        sel = sel / np.maximum(sel.sum(axis=1, keepdims=True), F32(MOE_MIN_SUM))
    ids[:n_tokens], w[:n_tokens] = order, sel * F32(w_scale)
    return ids, w


def matmul_id(x: np.ndarray, w: np.ndarray, ids: np.ndarray, *, n_tokens: int) -> np.ndarray:
    """``y[t, j*n:(j+1)*n] = w[ids[t, j]] @ x_tj`` (x_tj: row t, or its j-th block when x holds one block per
    chosen expert); only the chosen experts are touched. Padded rows are zero."""
    T, K = ids.shape
    E, n, k = w.shape
    per_slot = x.shape[1] == K * k
    y = np.zeros((T, K * n), F32)
    for e in np.unique(ids[:n_tokens]):
        t, j = np.nonzero(ids[:n_tokens] == e)
        xs = x[t, :].reshape(len(t), -1, k)[np.arange(len(t)), j if per_slot else 0]
        out = xs @ w[e].T
        for r in range(len(t)):
            y[t[r], j[r] * n:(j[r] + 1) * n] = out[r]
    return y


def moe_sum(y: np.ndarray, w: np.ndarray) -> np.ndarray:
    """``sum_j w[t, j] * y[t, j-th block]``: the chosen experts' outputs mixed by their weights."""
    T, K = w.shape
    return np.einsum("tjn,tj->tn", y.reshape(T, K, -1), w).astype(F32, copy=False)


def moe_sum_add(y: np.ndarray, w: np.ndarray, res: np.ndarray) -> np.ndarray:
    """``res + moe_sum(y, w)`` (fused: the mixed experts' output added to the residual)."""
    return (res + moe_sum(y, w)).astype(F32, copy=False)


def matmul_id_sum_add(x: np.ndarray, w: np.ndarray, ids: np.ndarray, weights: np.ndarray, res: np.ndarray, *,
                      n_tokens: int) -> np.ndarray:
    """``moe_sum_add(matmul_id(x, w, ids), weights, res)`` (fused: the experts' down products, mixed and added
    to the residual)."""
    return moe_sum_add(matmul_id(x, w, ids, n_tokens=n_tokens), weights, res)


def matmul_id_glu(x: np.ndarray, w_gate: np.ndarray, w_up: np.ndarray, ids: np.ndarray, *, n_tokens: int,
                  act: str) -> np.ndarray:
    """``glu(matmul_id(x, w_gate, ids), matmul_id(x, w_up, ids))`` (fused: the experts' gate, up and GLU)."""
    return glu(matmul_id(x, w_gate, ids, n_tokens=n_tokens), matmul_id(x, w_up, ids, n_tokens=n_tokens), act=act)


def moe_route(x: np.ndarray, w: np.ndarray, norm_w: np.ndarray, *, eps: float, k: int, norm: bool,
              w_scale: float = 1.0, n_tokens: int) -> tuple[np.ndarray, np.ndarray, np.ndarray]:
    """``h = rms_norm(x, norm_w)`` and ``moe_gate(matmul(h, w))`` (fused: the FFN's norm, router and gate)."""
    h = rms_norm(x, norm_w, eps=eps, group=x.shape[1])
    return (h, *moe_gate(matmul(h, w, n_tokens=n_tokens), k=k, norm=norm, w_scale=w_scale, n_tokens=n_tokens))


def layer_norm(x: np.ndarray, w: np.ndarray, b: np.ndarray, *, eps: float) -> np.ndarray:
    """``(x - mean) / sqrt(var + eps) * w + b`` over each row (two passes, as ggml_norm)."""
    c = x - x.mean(axis=1, keepdims=True, dtype=F32)
    var = np.einsum("rn,rn->r", c, c)[:, None] * F32(1.0 / x.shape[1])
    return c / np.sqrt(var + F32(eps)) * w + b


def add_rows(x: np.ndarray, table, positions: np.ndarray | None = None, *, row: int,
             n_tokens: int) -> np.ndarray:
    """``x[t] + table[row]`` (row >= 0) or ``x[t] + table[positions[t]]`` (row == -1) for the valid rows."""
    ids = np.full(n_tokens, row, np.int64) if row >= 0 else np.asarray(positions[:n_tokens], np.int64)
    out = x.copy()
    out[:n_tokens] += np.asarray(table[ids], dtype=F32)
    return out


def attention_self(q: np.ndarray, k: np.ndarray, v: np.ndarray, *, n_head: int, n_head_kv: int, head_dim: int,
                   v_head_dim: int, scale: float, n_tokens: int) -> np.ndarray:
    """Softmax attention of every valid row over every valid row (no mask beyond the padding)."""
    T, n, g = q.shape[0], n_tokens, n_head // n_head_kv
    qh = q[:n].reshape(n, n_head_kv, g, head_dim).transpose(1, 2, 0, 3)        # [Hkv, g, n, D]
    kh = k[:n].reshape(n, n_head_kv, head_dim).transpose(1, 2, 0)              # [Hkv, D, n]
    vh = v[:n].reshape(n, n_head_kv, v_head_dim).transpose(1, 0, 2)            # [Hkv, n, Dv]
    s = np.matmul(qh, kh[:, None]) * F32(scale)
    s = np.exp(s - s.max(axis=-1, keepdims=True))
    s /= s.sum(axis=-1, keepdims=True)
    o = np.matmul(s, vh[:, None])
    out = np.zeros((T, n_head * v_head_dim), F32)
    out[:n] = o.transpose(2, 0, 1, 3).reshape(n, n_head * v_head_dim)
    return out
