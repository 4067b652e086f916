"""The op-graph IR: values, nodes and a builder with shape inference.

A graph describes one *step*: T rows (tokens) belonging to up to S sequences, each row at its own position
of its own sequence. It never changes between steps. Everything that does change per step (which tokens,
positions and sequences the rows are, how many rows and sequences are valid, sampling settings) is a graph
*input* or a *step parameter*, never baked into the graph.

Conventions that keep backends simple:
- every activation is 2-D: ``[rows, cols]`` f32 (heads are packed along cols, ``[T, n_head * head_dim]``),
  so no op needs views or strides; ops that care about heads take ``n_head``/``head_dim`` attributes;
- weights are GGUF tensors referenced by name and quant type, never copied into the graph;
- the step's inputs (all i32): ``tokens[T]`` (the id of each row), ``positions[T]`` (the row's position in
  its sequence), ``row_seq[T]`` (the row's sequence slot, 0 .. S-1), ``block_table[S, MB]`` (each slot's
  KV blocks; MB = ceil(n_ctx / KV_BLOCK)) and ``out_rows[S]`` (the row whose logits slot s returns: its
  last row in the step). Rows of a sequence are contiguous and in position order (the runtime guarantees
  it; kernels may rely on it);
- the step parameters: ``n_tokens`` (valid rows; rows ``n_tokens .. T-1`` are padding, garbage that must
  never influence a valid row) and ``n_seqs`` (valid slots);
- the KV cache is *state* that persists across steps: one paged pool per layer, ``cache_k.{il}`` /
  ``cache_v.{il}`` of shape ``[n_blocks * KV_BLOCK, Hkv * D]``. Logical row j of the sequence in slot s
  lives at physical row ``phys(s, j) = block_table[s, j // KV_BLOCK] * KV_BLOCK + j % KV_BLOCK`` (attr
  ``block_size`` == KV_BLOCK on the ops that read or write the cache). It is stored as ``f16`` (llama.cpp's
  default cache type, half the bytes attention reads): values are rounded to nearest even when written,
  and ops compute in f32. A state's dtype may instead be ``q8_0`` or ``q4_0`` (llama.cpp's ``-ctk/-ctv``):
  each row stored as ggml's blocks of that type, quantized when written and dequantized when read
  (``oxigpu/quant/kvcache.py``); its shape stays ``[rows, width]`` in values.

Graph kinds: a *decode* graph (``Graph.decode``) has one row per sequence, row t in slot t (T == S; the
runtime sets ``row_seq[t] = out_rows[t] = t``), so it returns ``logits [S, vocab]`` without a gather; a
*mixed* graph (prefill chunks and decode rows together) gathers each slot's last row (``gather_rows``) and
returns ``logits [S, vocab]``; the teacher-forcing graph returns ``logits [T, vocab]``.

The op catalogue (semantics are defined by the numpy reference in ``oxigpu/backends/numpy_ops.py``; each
op's inputs, which of them are raw weights, f32 vectors, step inputs or states it writes, and its optional
trailing inputs are in :data:`OPS`, the one table every layer reads):

=============  =============================================  ===========================================
op             inputs -> outputs                              attrs
=============  =============================================  ===========================================
embed          tokens i32[T], table W[vocab, d] -> [T, d]     scale (multiply rows, gemma: sqrt(d)); row
                                                              t = W[tokens[t]] * scale for t < n_tokens,
                                                              zero rows after
rms_norm       x[R, n], w[g] -> [R, n]                        eps, group (normalize each run of ``group``
                                                              cols; g == group; group == n for a plain norm)
matmul         x[R, k], W[n, k] (, bias[n]) -> [R, n]         (none) y = x @ W.T (+ bias)
rope           x[T, H*D], positions i32[T]                    n_head, head_dim, n_rot, base, neox,
               (, freq_factors[n_rot/2]) -> [T, H*D]          freq_scale; row t rotates at position
                                                              p = positions[t]: theta_i = p * freq_scale *
                                                              base^(-2i/n_rot) / freq_factors_i (each
                                                              head's first n_rot dims; NEOX pairs (i,
                                                              i + n_rot/2), normal pairs (2i, 2i+1))
kv_store       k[T, Hkv*D], v[T, Hkv*Dv], K, V (state),       block_size; for t < n_tokens:
               positions, row_seq i32[T], block_table         K[phys(row_seq[t], positions[t])] = k[t],
               i32[S, MB] -> (none)                           V[...] = v[t] (rounded to f16); nothing else
                                                              is written
attention      q[T, H*D], K[n_blocks*B, Hkv*D],               n_head, n_head_kv, head_dim, v_head_dim,
               V[n_blocks*B, Hkv*Dv], positions, row_seq      scale, window (0: none), softcap (0: none),
               i32[T], block_table i32[S, MB] -> [T, H*Dv]    block_size; query row t < n_tokens (slot
                                                              s = row_seq[t], position p = positions[t])
                                                              attends to the logical keys j of slot s with
                                                              j <= p and (window == 0 or j > p - window),
                                                              read at phys(s, j): this step's kv_store
                                                              writes included. Scores scale * q.k, then
                                                              softcap * tanh(s / softcap) when softcap >
                                                              0 (gemma2's soft-cap), softmax; query head h
                                                              reads KV head h // (n_head / n_head_kv).
                                                              Rows t >= n_tokens are zero
add            a[R, n], b[R, n] -> [R, n]
glu            gate[R, n], up[R, n] -> [R, n]                 act: "silu" | "gelu_tanh"; act(gate) * up
gather_rows    x[T, n], rows i32[S] -> [S, n]                 (none) row s = x[rows[s]] for s < n_seqs,
                                                              zero rows after
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
add_rows       x[T, n], table[m, n] (, positions i32[T])      row; x[t] + table[row], or with row == -1
               -> [T, n]                                      x[t] + table[positions[t]] (token-type and
                                                              absolute position embeddings); padded rows:
                                                              x[t]
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
matmul_glu         x[R, k], W_gate[n, k], W_up[n, k] -> [R, n]    act; glu(matmul(x, W_gate),
                                                                  matmul(x, W_up)) (both weights of one
                                                                  quant type)
(prologue)         matmul_multi / matmul_glu with attr norm_eps   x replaced by rms_norm(x, w_norm,
                   take one more input, w_norm[k], last           norm_eps) (whole-row norm)
rms_norm_add       x[R, n], w[g], res[R, n] -> [R, n]             eps, group; add(res, rms_norm(x, w))
                                                                  (a block's post-norm and its residual)
moe_sum_add        y[T, K*n], w[T, K], res[T, n] -> [T, n]        (none) add(res, moe_sum(y, w))
matmul_id_sum_add  x[T, K*k], W[E, n, k], ids i32[T, K],          (none) moe_sum_add(matmul_id(x, W, ids),
                   weights[T, K], res[T, n] -> [T, n]             weights, res) (decode graphs: the mix
                                                                  in the experts' GEMV epilogue)
matmul_id_glu      x[T, k], W_gate[E, n, k], W_up[E, n, k],       act; glu(matmul_id(x, W_gate, ids),
                   ids i32[T, K] -> [T, K*n]                      matmul_id(x, W_up, ids)) (both weights
                                                                  of one quant type)
moe_route          x[T, d], W_router[E, d], w_norm[d]             eps, k, norm, w_scale; h = rms_norm(x,
                   -> h[T, d], ids i32[T, K], w[T, K]             w_norm, eps), then moe_gate(matmul(h,
                                                                  W_router)) (decode graphs: the norm,
                                                                  router and gate in one dispatch)
rope_kv_store      q[T, H*D], k[T, Hkv*D], v[T, Hkv*Dv], K, V     n_head, n_head_kv, block_size and
                   (state), positions, row_seq, block_table       rope's other attrs; kv_store(rope(k,
                   (, freq_factors) -> [T, H*D]                   positions), v, K, V, positions, row_seq,
                                                                  block_table); returns rope(q, positions)
rope_kv_attention  as rope_kv_store -> [T, H*Dv]                  rope_kv_store's and attention's attrs;
                                                                  attention(rope_kv_store(...), K, V,
                                                                  positions, row_seq, block_table)
                                                                  (decode graphs only: one row per
                                                                  sequence, so no row needs another
                                                                  row's keys of this step first)
(q/k norms)         rope_kv_attention with attr qk_norm_eps takes   q and k replaced by rms_norm(q, q_norm,
                   two more inputs, q_norm[D], k_norm[D], last     eps, group=D), likewise k (qwen3's
                                                                  per-head norms)
=================  =============================================  =======================================

``sample`` is in :data:`OPS` too, though no graph holds it: the wgpu backend's GPU-resident decode appends
it to a decode plan (its numpy twin is ``oxigpu.runtime.sampling``).
"""
from __future__ import annotations

from dataclasses import dataclass, field
from typing import Any, Literal

from ..quant import kvcache as kvq

Kind = Literal["input", "weight", "state", "temp", "output"]
DType = Literal["f32", "i32", "f16", "q8_0", "q4_0"]

STEP_PARAMS = ("n_tokens", "n_seqs")
"""Per-step scalars every backend provides: valid rows, valid sequence slots."""

KV_BLOCK = 32
"""Rows per KV-cache block (attr ``block_size`` of the ops that read or write the cache)."""

STEP_INPUTS = ("tokens", "positions", "row_seq", "block_table", "out_rows")
"""The graph inputs a step provides (all i32; see the module docstring); a graph has those its ops read."""


# -- the op-spec table ------------------------------------------------------------------------------------
SlotKind = Literal["act", "ids", "matrix", "table", "vec", "state"]
"""What an input slot holds. ``act``: an f32 activation; ``ids``: i32 ids; ``matrix``: a weight read whole as
raw GGUF blocks (matmul weights); ``table``: a weight read as raw GGUF blocks, only the rows its ids name
(embed's table); ``vec``: a small weight read as f32 (norm weights, biases, RoPE factors; dequantized if
the file stores it otherwise); ``state``: a KV cache (f16)."""


@dataclass(frozen=True)
class Slot:
    """One input (or a run of inputs) of an op."""

    name: str
    kind: SlotKind
    writes: bool = False          # a state the op writes in place
    optional: bool = False        # trailing; may be absent
    repeat: str | None = None     # attr holding how many inputs this slot stands for (matmul_multi's n_w)
    when: str | None = None       # present exactly when this attr is set (the norm prologue's weight)

    @property
    def raw(self) -> bool:
        """Read as raw GGUF blocks (the wgpu backend uploads these still quantized)."""
        return self.kind in ("matrix", "table")


@dataclass(frozen=True)
class OpSpec:
    """An op's inputs in order; optional slots trail the required ones."""

    slots: tuple[Slot, ...]
    graph: bool = True            # False: run by a backend beside a plan, never a graph node (``sample``)


def _s(name: str, kind: SlotKind, **kw: Any) -> Slot:
    return Slot(name, kind, **kw)


_ROPE_FF = _s("freq_factors", "vec", optional=True)
_KV = (_s("cache_k", "state", writes=True), _s("cache_v", "state", writes=True))
_KV_READ = (_s("cache_k", "state"), _s("cache_v", "state"))
_PAGED = (_s("positions", "ids"), _s("row_seq", "ids"), _s("block_table", "ids"))
_QKV = (_s("q", "act"), _s("k", "act"), _s("v", "act"))

OPS: dict[str, OpSpec] = {
    "embed": OpSpec((_s("ids", "ids"), _s("table", "table"))),
    "rms_norm": OpSpec((_s("x", "act"), _s("w", "vec"))),
    "rms_norm_add": OpSpec((_s("x", "act"), _s("w", "vec"), _s("res", "act"))),
    "matmul": OpSpec((_s("x", "act"), _s("w", "matrix"), _s("bias", "vec", optional=True))),
    "rope": OpSpec((_s("x", "act"), _s("positions", "ids"), _ROPE_FF)),
    "kv_store": OpSpec((_s("k", "act"), _s("v", "act"), *_KV, *_PAGED)),
    "attention": OpSpec((_s("q", "act"), *_KV_READ, *_PAGED)),
    "add": OpSpec((_s("a", "act"), _s("b", "act"))),
    "glu": OpSpec((_s("gate", "act"), _s("up", "act"))),
    "gather_rows": OpSpec((_s("x", "act"), _s("rows", "ids"))),
    "matmul_add": OpSpec((_s("x", "act"), _s("w", "matrix"), _s("res", "act"),
                          _s("bias", "vec", optional=True))),
    "matmul_multi": OpSpec((_s("x", "act"), _s("w", "matrix", repeat="n_w"),
                            _s("bias", "vec", optional=True, repeat="n_w"),
                            _s("norm_w", "vec", optional=True, when="norm_eps"))),
    "matmul_glu": OpSpec((_s("x", "act"), _s("w_gate", "matrix"), _s("w_up", "matrix"),
                          _s("norm_w", "vec", optional=True, when="norm_eps"))),
    "rope_kv_store": OpSpec((*_QKV, *_KV, *_PAGED, _ROPE_FF)),
    "rope_kv_attention": OpSpec((*_QKV, *_KV, *_PAGED, _ROPE_FF, _s("q_norm", "vec", optional=True, when="qk_norm_eps"),
                                 _s("k_norm", "vec", optional=True, when="qk_norm_eps"))),
    "sample": OpSpec((_s("logits", "act"), _s("slots", "ids", writes=True), _s("history", "ids", writes=True),
                      _s("sparse", "ids"), _s("mask", "ids"), _s("logprobs", "ids", writes=True)), graph=False),
    # row n_tokens - 1 of x: what the wgpu backend runs a one-slot gather_rows as until its kernels
    # read out_rows (backends/wgpu/backend.py, _contiguous)
    "last_row": OpSpec((_s("x", "act"),), graph=False),
    "split": OpSpec((_s("x", "act"),)),
    "scale": OpSpec((_s("x", "act"),)),
    "act": OpSpec((_s("x", "act"),)),
    "moe_gate": OpSpec((_s("logits", "act"),)),
    "matmul_id": OpSpec((_s("x", "act"), _s("w", "matrix"), _s("ids", "ids"))),
    "moe_sum": OpSpec((_s("y", "act"), _s("w", "act"))),
    "moe_sum_add": OpSpec((_s("y", "act"), _s("w", "act"), _s("res", "act"))),
    "matmul_id_sum_add": OpSpec((_s("x", "act"), _s("w", "matrix"), _s("ids", "ids"), _s("weights", "act"),
                                 _s("res", "act"))),
    "matmul_id_glu": OpSpec((_s("x", "act"), _s("w_gate", "matrix"), _s("w_up", "matrix"), _s("ids", "ids"))),
    "moe_route": OpSpec((_s("x", "act"), _s("w", "matrix"), _s("norm_w", "vec"))),
    "layer_norm": OpSpec((_s("x", "act"), _s("w", "vec"), _s("b", "vec"))),
    "add_rows": OpSpec((_s("x", "act"), _s("table", "table"), _s("positions", "ids", optional=True))),
    "attention_self": OpSpec((_s("q", "act"), _s("k", "act"), _s("v", "act"))),
}
"""Every op's input slots (see :class:`Slot`). Backends, fusion, the plan compiler and the kernels read
input roles from here (:func:`input_slots`, :func:`args`) instead of counting positions themselves."""


def input_slots(op: str, attrs: dict[str, Any], n_inputs: int) -> tuple[Slot, ...]:
    """One slot per input of a node of ``op`` with ``attrs`` and ``n_inputs`` inputs (repeats expanded,
    absent optional slots dropped); ValueError when the inputs do not fit the op's spec."""
    spec = OPS.get(op)
    if spec is None:
        raise ValueError(f"unknown op {op!r}")
    fixed = [s for s in spec.slots if not s.optional or (s.when is not None and s.when in attrs)]

    def count(s: Slot) -> int:
        return int(attrs[s.repeat]) if s.repeat else 1

    left = n_inputs - sum(count(s) for s in fixed)
    out: list[Slot] = []
    for s in spec.slots:
        if s.optional and s.when is None:
            if left < count(s):
                continue
            left -= count(s)
        elif s not in fixed:
            continue
        out += [s] * count(s)
    if left != 0 or len(out) != n_inputs:
        raise ValueError(f"op {op!r} with attrs {attrs} does not take {n_inputs} inputs")
    return tuple(out)


def slots_of(node: Node) -> tuple[Slot, ...]:
    """:func:`input_slots` of a graph node."""
    return input_slots(node.op, node.attrs, len(node.inputs))


def args(node: Node, name: str) -> tuple[Value, ...]:
    """The inputs of ``node`` in slot ``name`` (several for a repeated slot, none for an absent one)."""
    return tuple(v for v, s in zip(node.inputs, slots_of(node)) if s.name == name)


def arg(node: Node, name: str) -> Value | None:
    """The one input of ``node`` in slot ``name``, or None when that optional slot is absent."""
    vs = args(node, name)
    return vs[0] if vs else None


def matrices(node: Node) -> tuple[Value, ...]:
    """The weight matrices ``node`` multiplies by (its ``matrix`` slots, in order)."""
    return tuple(v for v, s in zip(node.inputs, slots_of(node)) if s.kind == "matrix")


def written_states(node: Node) -> tuple[Value, ...]:
    """The states ``node`` writes in place (the KV caches of ``kv_store`` and its fused forms)."""
    return tuple(v for v, s in zip(node.inputs, slots_of(node)) if s.writes)


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
        if self.dtype in ("q8_0", "q4_0"):
            return self.shape[0] * kvq.row_bytes(self.dtype, self.shape[1])
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

    def __init__(self, n_tokens: int, n_seqs: int = 1, decode: bool = False):
        if decode and n_tokens != n_seqs:
            raise ValueError(f"a decode graph has one row per sequence: T={n_tokens}, S={n_seqs}")
        self.T = n_tokens
        self.S = n_seqs
        self.decode = decode
        """One row per sequence slot (row t in slot t): see the module docstring."""
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

    def state(self, name: str, shape: tuple[int, ...], dtype: DType = "f16") -> Value:
        """A KV cache: f16, q8_0 or q4_0 (see the module docstring)."""
        _check(dtype in kvq.KV_TYPES, f"state {name!r}: KV cache types are {kvq.KV_TYPES}, not {dtype!r}")
        kvq.check_width(dtype, shape[1])
        v = self._value(name, shape, dtype, "state")
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

    def rope(self, x: Value, positions: Value, n_head: int, head_dim: int, n_rot: int, base: float, neox: bool,
             freq_scale: float = 1.0, freq_factors: Value | None = None, name: str = "") -> Value:
        _check(x.shape[1] == n_head * head_dim and n_rot <= head_dim and n_rot % 2 == 0,
               "rope: bad head layout", x)
        _check(positions.shape == (x.shape[0],) and positions.dtype == "i32", "rope: positions i32[T]", positions)
        _check(freq_factors is None or freq_factors.shape == (n_rot // 2,), "rope: freq_factors shape",
               x, *(() if freq_factors is None else (freq_factors,)))
        attrs = dict(n_head=n_head, head_dim=head_dim, n_rot=n_rot, base=float(base), neox=bool(neox),
                     freq_scale=float(freq_scale))
        ins = (x, positions) if freq_factors is None else (x, positions, freq_factors)
        return self._node("rope", ins, [x.shape], attrs, name)[0]

    def kv_store(self, k: Value, v: Value, cache_k: Value, cache_v: Value, positions: Value, row_seq: Value,
                 block_table: Value) -> None:
        _check(k.shape[1] == cache_k.shape[1] and v.shape[1] == cache_v.shape[1],
               "kv_store: cache width", k, cache_k)
        _check_paged(k.shape[0], cache_k, positions, row_seq, block_table)
        self._node("kv_store", (k, v, cache_k, cache_v, positions, row_seq, block_table), [],
                   {"block_size": KV_BLOCK})

    def attention(self, q: Value, cache_k: Value, cache_v: Value, positions: Value, row_seq: Value,
                  block_table: Value, n_head: int, n_head_kv: int, head_dim: int, v_head_dim: int, scale: float,
                  window: int = 0, softcap: float = 0.0) -> Value:
        _check(q.shape[1] == n_head * head_dim and n_head % n_head_kv == 0
               and cache_k.shape[1] == n_head_kv * head_dim
               and cache_v.shape[1] == n_head_kv * v_head_dim, "attention: head layout", q, cache_k)
        _check_paged(q.shape[0], cache_k, positions, row_seq, block_table)
        attrs = dict(n_head=n_head, n_head_kv=n_head_kv, head_dim=head_dim, v_head_dim=v_head_dim,
                     scale=float(scale), window=int(window), softcap=float(softcap), block_size=KV_BLOCK)
        return self._node("attention", (q, cache_k, cache_v, positions, row_seq, block_table),
                          [(q.shape[0], n_head * v_head_dim)], attrs)[0]

    def add(self, a: Value, b: Value, name: str = "") -> Value:
        _check(a.shape == b.shape, "add: shapes differ", a, b)
        return self._node("add", (a, b), [a.shape], {}, name)[0]

    def glu(self, gate: Value, up: Value, act: str, name: str = "") -> Value:
        _check(gate.shape == up.shape and act in ("silu", "gelu_tanh"), "glu: shapes/act", gate, up)
        return self._node("glu", (gate, up), [gate.shape], {"act": act}, name)[0]

    def gather_rows(self, x: Value, rows: Value) -> Value:
        _check(rows.dtype == "i32" and len(rows.shape) == 1, "gather_rows: rows must be i32[S]", rows)
        return self._node("gather_rows", (x, rows), [(rows.shape[0], x.shape[1])])[0]

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

    def add_rows(self, x: Value, table: Value, row: int, positions: Value | None = None, name: str = "") -> Value:
        """``x[t] + table[row]``, or with ``row`` -1 ``x[t] + table[positions[t]]``."""
        _check(len(table.shape) == 2 and table.shape[1] == x.shape[1] and -1 <= row < table.shape[0]
               and (row >= 0) == (positions is None), "add_rows: table width / row / positions", x, table)
        ins = (x, table) if positions is None else (x, table, positions)
        return self._node("add_rows", ins, [x.shape], {"row": int(row)}, name)[0]

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


def _check_paged(T: int, cache: Value, positions: Value, row_seq: Value, block_table: Value) -> None:
    _check(positions.shape == (T,) and row_seq.shape == (T,) and len(block_table.shape) == 2
           and all(v.dtype == "i32" for v in (positions, row_seq, block_table))
           and cache.shape[0] % KV_BLOCK == 0, "paged cache: positions/row_seq i32[T], block_table i32[S, MB], "
           f"cache rows a multiple of {KV_BLOCK}", positions, row_seq, block_table, cache)


def _check(ok: bool, msg: str, *vals: Value) -> None:
    if not ok:
        raise ValueError(f"{msg}: {vals}")
