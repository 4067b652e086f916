"""The op-graph IR: values, nodes and a builder with shape inference.

A model builder describes "T tokens at positions pos .. pos+T-1" once; the graph never changes between
steps. Everything that does change per step (pos, the number of valid tokens, sampling settings) is a
*step parameter*, read by ops at run time, never baked into the graph.

Conventions that keep backends simple:
- every activation is 2-D: ``[rows, cols]`` f32 (heads are packed along cols, ``[T, n_head * head_dim]``),
  so no op needs views or strides; ops that care about heads take ``n_head``/``head_dim`` attributes;
- weights are GGUF tensors referenced by name and quant type, never copied into the graph;
- the KV cache is *state*: a value that persists across steps, written by ``kv_store`` and read by
  ``attention``; rows ``pos .. pos+n_tokens-1`` are written each step. It is stored as ``f16`` (llama.cpp's
  default cache type, half the bytes attention reads): values are rounded to nearest even when written,
  and ops compute in f32;
- rows ``n_tokens .. T-1`` of a padded chunk are garbage and must never influence valid rows.

The op catalogue (semantics are defined by the numpy reference in ``oxigpu/backends/numpy_ops.py``):

=============  =============================================  ===========================================
op             inputs -> outputs                              attrs
=============  =============================================  ===========================================
embed          ids i32[T], table W[vocab, d] -> [T, d]        scale (multiply rows, gemma: sqrt(d))
rms_norm       x[R, n], w[g] -> [R, n]                        eps, group (normalize each run of ``group``
                                                              cols; g == group; group == n for a plain norm)
matmul         x[R, k], W[n, k] (, bias[n]) -> [R, n]         (none) y = x @ W.T (+ bias)
rope           x[T, H*D] (, freq_factors[n_rot/2])            n_head, head_dim, n_rot, base, neox, freq_scale;
               -> [T, H*D]                                    row t is at position pos + t; theta_i =
                                                              pos*freq_scale*base^(-2i/n_rot)/freq_factors_i
kv_store       k[T, Hkv*D], v[T, Hkv*Dv], K, V (state)        (none) K[pos+t] = k[t], V[pos+t] = v[t] for
                                                              t < n_tokens (rounded to f16)
attention      q[T, H*D], K[n_ctx, Hkv*D], V[n_ctx, Hkv*Dv]   n_head, n_head_kv, head_dim, v_head_dim,
               -> [T, H*Dv]                                   scale, window (0: none), softcap (0: none);
                                                              query t (position p = pos+t) sees keys j with
                                                              j <= p and (window == 0 or j > p - window)
add            a[R, n], b[R, n] -> [R, n]
mul            a[R, n], b[R, n] -> [R, n]
glu            gate[R, n], up[R, n] -> [R, n]                 act: "silu" | "gelu_tanh"; act(gate) * up
last_row       x[T, n] -> [1, n]                              (none) row n_tokens - 1
split          x[R, n_0 + .. + n_{m-1}] -> m outputs          sizes; y_i = the next n_i columns (fused q/k/v,
               y_i[R, n_i]                                    fused gate/up weights)
scale          x[R, n] -> [R, n]                              scale, softcap (0: none); y = x * scale, then
                                                              softcap * tanh(y / softcap) (final-logit caps,
                                                              residual and logit multipliers)
act            x[R, n] -> [R, n]                              act: "gelu_tanh"; act(x) (ungated FFNs)
moe_gate       logits[T, E] -> ids i32[T, K], w[T, K]         k (= K), norm, w_scale; the K largest of
                                                              softmax(logits) per row, largest first (ties:
                                                              lower id), their probabilities as w,
                                                              renormalized to sum 1 when norm, times w_scale
matmul_id      x[T, k] or x[T, K*k], W[E, n, k], ids i32[T, K]  y[t, j*n:(j+1)*n] = W[ids[t, j]] @ x_tj, x_tj =
               -> [T, K*n]                                    x[t] or its j-th block of k (mixture-of-experts
                                                              GEMMs: only the chosen experts are read)
moe_sum        y[T, K*n], w[T, K] -> [T, n]                   (none) sum_j w[t, j] * y[t, j*n:(j+1)*n]
layer_norm     x[R, n], w[n], b[n] -> [R, n]                  eps; (x - mean) / sqrt(var + eps) * w + b
add_rows       x[T, n], table[m, n] -> [T, n]                 row; x[t] + table[row], or with row == -1
                                                              x[t] + table[pos + t] (token-type and absolute
                                                              position embeddings); padded rows: x[t]
attention_self q[T, H*D], k[T, Hkv*D], v[T, Hkv*Dv]           n_head, n_head_kv, head_dim, v_head_dim, scale;
               -> [T, H*Dv]                                   every valid row attends every valid row of the
                                                              chunk (encoders: no cache, no causal mask);
                                                              padded rows are zero
=============  =============================================  ===========================================

Fused ops, made only by ``oxigpu.graph.fuse`` (each is exactly the composition of the ops it replaces):

=================  =============================================  =======================================
op                 inputs -> outputs                              attrs
=================  =============================================  =======================================
matmul_add         x[R, k], W[n, k], res[R, n] (, bias[n])        (none) add(res, matmul(x, W, bias))
                   -> [R, n]
matmul_multi       x[R, k], W_0[n_0, k] .. W_{m-1}                n_w = m; y_i = matmul(x, W_i, bias_i)
                   (, bias_0[n_0] .. bias_{m-1}) -> m outputs
                   y_i[R, n_i]
matmul_glu         x[1, k], W_gate[n, k], W_up[n, k] -> [1, n]    act; glu(matmul(x, W_gate),
                                                                  matmul(x, W_up)) (decode graphs only:
                                                                  T == 1)
(prologue)         matmul_multi / matmul_glu with attr norm_eps   x replaced by rms_norm(x, w_norm,
                   take one more input, w_norm[k], last           norm_eps) (whole-row norm; decode
                                                                  graphs only)
rope_kv_store      q[T, H*D], k[T, Hkv*D], v[T, Hkv*Dv], K, V     n_head, n_head_kv and rope's other
                   (state) (, freq_factors) -> [T, H*D]           attrs; kv_store(rope(k), v, K, V);
                                                                  returns rope(q)
rope_kv_attention  q[1, H*D], k[1, Hkv*D], v[1, Hkv*Dv], K, V     rope_kv_store's and attention's attrs;
                   (state) (, freq_factors) -> [1, H*Dv]          attention(rope_kv_store(q, k, v, K, V),
                                                                  K, V) (decode graphs only: T == 1)
=================  =============================================  =======================================

Changes since the first version (additive): ``rope`` takes an optional second input, llama 3.1+'s
``rope_freqs.weight`` frequency divisors. KV caches (states) are stored as ``f16`` (they were f32).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

Kind = Literal["input", "weight", "state", "temp", "output"]
DType = Literal["f32", "i32", "f16"]

STEP_PARAMS = ("pos", "n_tokens")
"""Per-step scalars every backend provides: first position of the chunk, valid rows in the chunk."""


@dataclass(eq=False)
class Value:
    """A tensor in the graph. Identity is object identity."""

    id: int
    name: str
    shape: tuple[int, ...]
    dtype: DType
    kind: Kind
    tensor: str | None = None      # weights: the GGUF tensor name
    ggml_type: int | None = None   # weights: the GGUF tensor's ggml type

    @property
    def nbytes(self) -> int:
        n = 2 if self.dtype == "f16" else 4
        for s in self.shape:
            n *= s
        return n

    def __repr__(self) -> str:
        return f"%{self.id}:{self.name}{list(self.shape)}"


@dataclass(eq=False)
class Node:
    op: str
    inputs: tuple[Value, ...]
    outputs: tuple[Value, ...]
    attrs: dict[str, Any] = field(default_factory=dict)
    name: str = ""

    def __repr__(self) -> str:
        return f"{self.name or self.op}({', '.join(map(repr, self.inputs))}) -> {list(self.outputs)}"


class Graph:
    """A straight-line list of nodes built in execution order, with shape checks at build time."""

    def __init__(self, n_tokens: int):
        self.T = n_tokens
        self.values: list[Value] = []
        self.nodes: list[Node] = []
        self.inputs: dict[str, Value] = {}
        self.outputs: dict[str, Value] = {}
        self.weights: dict[str, Value] = {}
        self.states: dict[str, Value] = {}
        self._scope = ""

    # -- values ---------------------------------------------------------------------------------
    def _value(self, name: str, shape: tuple[int, ...], dtype: DType, kind: Kind, **kw) -> Value:
        v = Value(len(self.values), name, tuple(int(s) for s in shape), dtype, kind, **kw)
        self.values.append(v)
        return v

    def input(self, name: str, shape: tuple[int, ...], dtype: DType = "i32") -> Value:
        v = self._value(name, shape, dtype, "input")
        self.inputs[name] = v
        return v

    def weight(self, tensor: str, shape: tuple[int, ...], ggml_type: int) -> Value:
        """A GGUF tensor in numpy order (``[n_out, n_in]`` for a matrix); shared if named twice."""
        if tensor in self.weights:
            return self.weights[tensor]
        v = self._value(tensor, shape, "f32", "weight", tensor=tensor, ggml_type=ggml_type)
        self.weights[tensor] = v
        return v

    def state(self, name: str, shape: tuple[int, ...]) -> Value:
        """A KV cache: f16 (see the module docstring)."""
        v = self._value(name, shape, "f16", "state")
        self.states[name] = v
        return v

    def output(self, name: str, v: Value) -> Value:
        if v.kind == "temp":
            v.kind = "output"
        self.outputs[name] = v
        return v

    def scope(self, prefix: str) -> Graph:
        """Name prefix for the nodes built next (e.g. ``blk.3``); for readable plans and diffs."""
        self._scope = prefix
        return self

    def _node(self, op: str, inputs: tuple[Value, ...], out_shapes: list[tuple[int, ...]],
              attrs: dict[str, Any] | None = None, name: str = "",
              out_dtypes: tuple[DType, ...] | None = None) -> list[Value]:
        label = f"{self._scope}.{name or op}" if self._scope else (name or op)
        dtypes = out_dtypes or ("f32",) * len(out_shapes)
        outs = [self._value(f"{label}:{i}" if len(out_shapes) > 1 else label, s, dt, "temp")
                for i, (s, dt) in enumerate(zip(out_shapes, dtypes))]
        self.nodes.append(Node(op, inputs, tuple(outs), dict(attrs or {}), label))
        return outs

    # -- ops ------------------------------------------------------------------------------------
    def embed(self, ids: Value, table: Value, scale: float = 1.0) -> Value:
        _check(ids.dtype == "i32" and len(ids.shape) == 1, "embed: ids must be i32[T]", ids)
        return self._node("embed", (ids, table), [(ids.shape[0], table.shape[1])],
                          {"scale": float(scale)})[0]

    def rms_norm(self, x: Value, w: Value, eps: float, group: int | None = None,
                 name: str = "") -> Value:
        group = x.shape[-1] if group is None else group
        _check(x.shape[-1] % group == 0 and w.shape == (group,), "rms_norm: bad group/weight", x, w)
        return self._node("rms_norm", (x, w), [x.shape], {"eps": float(eps), "group": group}, name)[0]

    def matmul(self, x: Value, w: Value, bias: Value | None = None, name: str = "") -> Value:
        _check(len(w.shape) == 2 and x.shape[1] == w.shape[1], "matmul: inner dims differ", x, w)
        ins = (x, w) if bias is None else (x, w, bias)
        if bias is not None:
            _check(bias.shape == (w.shape[0],), "matmul: bias shape", bias)
        return self._node("matmul", ins, [(x.shape[0], w.shape[0])], {}, name or w.name)[0]

    def rope(self, x: Value, n_head: int, head_dim: int, n_rot: int, base: float, neox: bool,
             freq_scale: float = 1.0, freq_factors: Value | None = None, name: str = "") -> Value:
        _check(x.shape[1] == n_head * head_dim and n_rot <= head_dim and n_rot % 2 == 0,
               "rope: bad head layout", x)
        _check(freq_factors is None or freq_factors.shape == (n_rot // 2,), "rope: freq_factors shape",
               x, *(() if freq_factors is None else (freq_factors,)))
        attrs = dict(n_head=n_head, head_dim=head_dim, n_rot=n_rot, base=float(base), neox=bool(neox),
                     freq_scale=float(freq_scale))
        ins = (x,) if freq_factors is None else (x, freq_factors)
        return self._node("rope", ins, [x.shape], attrs, name)[0]

    def kv_store(self, k: Value, v: Value, cache_k: Value, cache_v: Value) -> None:
        _check(k.shape[1] == cache_k.shape[1] and v.shape[1] == cache_v.shape[1],
               "kv_store: cache width", k, cache_k)
        self._node("kv_store", (k, v, cache_k, cache_v), [], {})

    def attention(self, q: Value, cache_k: Value, cache_v: Value, n_head: int, n_head_kv: int,
                  head_dim: int, v_head_dim: int, scale: float, window: int = 0,
                  softcap: float = 0.0) -> Value:
        _check(q.shape[1] == n_head * head_dim and n_head % n_head_kv == 0
               and cache_k.shape[1] == n_head_kv * head_dim
               and cache_v.shape[1] == n_head_kv * v_head_dim, "attention: head layout", q, cache_k)
        attrs = dict(n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, v_head_dim=v_head_dim,
                     scale=float(scale), window=int(window), softcap=float(softcap))
        return self._node("attention", (q, cache_k, cache_v), [(q.shape[0], n_head * v_head_dim)],
                          attrs)[0]

    def add(self, a: Value, b: Value, name: str = "") -> Value:
        _check(a.shape == b.shape, "add: shapes differ", a, b)
        return self._node("add", (a, b), [a.shape], {}, name)[0]

    def mul(self, a: Value, b: Value, name: str = "") -> Value:
        _check(a.shape == b.shape, "mul: shapes differ", a, b)
        return self._node("mul", (a, b), [a.shape], {}, name)[0]

    def glu(self, gate: Value, up: Value, act: str, name: str = "") -> Value:
        _check(gate.shape == up.shape and act in ("silu", "gelu_tanh"), "glu: shapes/act", gate, up)
        return self._node("glu", (gate, up), [gate.shape], {"act": act}, name)[0]

    def last_row(self, x: Value) -> Value:
        return self._node("last_row", (x,), [(1, x.shape[1])])[0]

    def split(self, x: Value, sizes: tuple[int, ...], name: str = "") -> list[Value]:
        _check(len(sizes) >= 2 and all(s > 0 for s in sizes) and sum(sizes) == x.shape[1],
               "split: sizes must be positive and add up to the columns", x)
        return self._node("split", (x,), [(x.shape[0], s) for s in sizes], {"sizes": tuple(int(s) for s in sizes)},
                          name)

    def scale(self, x: Value, scale: float = 1.0, softcap: float = 0.0, name: str = "") -> Value:
        return self._node("scale", (x,), [x.shape], {"scale": float(scale), "softcap": float(softcap)}, name)[0]

    def moe_gate(self, logits: Value, k: int, norm: bool, w_scale: float = 1.0,
                 name: str = "") -> tuple[Value, Value]:
        _check(1 <= k <= logits.shape[1], "moe_gate: k must be in 1..n_expert", logits)
        ids, w = self._node("moe_gate", (logits,), [(logits.shape[0], k)] * 2,
                            {"k": int(k), "norm": bool(norm), "w_scale": float(w_scale)}, name, ("i32", "f32"))
        return ids, w

    def matmul_id(self, x: Value, w: Value, ids: Value, name: str = "") -> Value:
        _check(len(w.shape) == 3 and ids.dtype == "i32" and ids.shape[0] == x.shape[0]
               and x.shape[1] in (w.shape[2], ids.shape[1] * w.shape[2]), "matmul_id: shapes", x, w, ids)
        return self._node("matmul_id", (x, w, ids), [(x.shape[0], ids.shape[1] * w.shape[1])], {},
                          name or w.name)[0]

    def moe_sum(self, y: Value, w: Value, name: str = "") -> Value:
        _check(y.shape[0] == w.shape[0] and y.shape[1] % w.shape[1] == 0, "moe_sum: shapes", y, w)
        return self._node("moe_sum", (y, w), [(y.shape[0], y.shape[1] // w.shape[1])], {}, name)[0]

    def layer_norm(self, x: Value, w: Value, b: Value, eps: float, name: str = "") -> Value:
        _check(w.shape == (x.shape[1],) and b.shape == w.shape, "layer_norm: weight/bias shape", x, w, b)
        return self._node("layer_norm", (x, w, b), [x.shape], {"eps": float(eps)}, name)[0]

    def add_rows(self, x: Value, table: Value, row: int, name: str = "") -> Value:
        _check(len(table.shape) == 2 and table.shape[1] == x.shape[1] and -1 <= row < table.shape[0],
               "add_rows: table width / row", x, table)
        return self._node("add_rows", (x, table), [x.shape], {"row": int(row)}, name)[0]

    def attention_self(self, q: Value, k: Value, v: Value, n_head: int, n_head_kv: int, head_dim: int,
                       v_head_dim: int, scale: float, name: str = "") -> Value:
        _check(q.shape[1] == n_head * head_dim and k.shape[1] == n_head_kv * head_dim
               and v.shape[1] == n_head_kv * v_head_dim and n_head % n_head_kv == 0
               and q.shape[0] == k.shape[0] == v.shape[0], "attention_self: head layout", q, k, v)
        attrs = dict(n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, v_head_dim=v_head_dim,
                     scale=float(scale))
        return self._node("attention_self", (q, k, v), [(q.shape[0], n_head * v_head_dim)], attrs, name)[0]

    def act(self, x: Value, act: str, name: str = "") -> Value:
        _check(act in ("gelu_tanh",), "act: unknown activation", x)
        return self._node("act", (x,), [x.shape], {"act": act}, name)[0]

    def __repr__(self) -> str:
        return "\n".join(map(repr, self.nodes))


def _check(ok: bool, msg: str, *vals: Value) -> None:
    if not ok:
        raise ValueError(f"{msg}: {vals}")
