"""Fusion: rewrite a Graph so a step needs fewer dispatches.

Each dispatch has a fixed cost of a few microseconds of GPU time (launch, barrier) and of Python (bind
groups, encoding) whatever its size, so a decode step of a small model is bound by their number. The
rewrites keep every original output Value (consumers are untouched) and each fused op's numpy reference is
the composition of the ops it replaces, so a fused graph computes the same numbers as the unfused one on
the numpy backend:

- ``matmul_multi``: matmuls reading the same input (q/k/v; gate/up) become one node (the GPU runs one
  dispatch per distinct weight type);
- ``matmul_glu``: a gate/up ``matmul_multi`` of one weight type followed by ``glu`` becomes one node
  storing act(x Wg) * (x Wu) (a GEMV; in prefill the matrix-unit GEMM's epilogue, or two GEMMs and the
  glu where that kernel is not there);
- ``matmul_add``: ``add(r, matmul(h, W))`` becomes a matmul with the residual added in its epilogue
  (attn_output, ffn_down; where a block's post-norm sits between them, nothing is fused); likewise
  ``moe_sum_add``: ``add(r, moe_sum(y, w))``, the experts' mix added to the residual in one pass;
  in decode graphs the experts' ``matmul_id`` before it joins it (``matmul_id_sum_add``: the experts' GEMV
  sums a token's pairs in its epilogue);
- ``matmul_id_glu``: the experts' gate and up ``matmul_id`` of one x, ids and weight type followed by
  ``glu`` become one node (decode: one GEMV over both weights, stored back to back, with the GLU in its
  epilogue; prefill: one routing for both grouped GEMMs);
- ``rms_norm_add``: ``add(r, rms_norm(y, w))`` whose normed value feeds only that add (the post-norm of
  gemma2/gemma3/olmo2 blocks, between their output matmul and the residual) becomes one node: the norm's
  kernel adds the residual as it stores;
- norm prologue: an ``rms_norm`` over whole rows read only by a ``matmul_multi`` or ``matmul_glu``
  moves into it (attr ``norm_eps``, the norm weight as its last input): each GEMV workgroup recomputes
  the row's sum of squares, cheap for d <= 4096; in prefill the matrix-unit GEMM's x pass normalizes
  each row as it rounds it to f16 (elsewhere the norm runs first, into a scratch);
- ``moe_route`` (decode graphs): the mixture-of-experts FFN's ``rms_norm``, its router ``matmul`` (F32 or
  F16 weights) and ``moe_gate`` become one node (one dispatch: the router GEMV's workgroups normalize x
  themselves, the first stores the normed row for the experts, the last to finish picks the experts);
- ``rope_kv_store``: ``rope(q)``, ``rope(k)`` and the ``kv_store`` of that k become one node (one
  dispatch rotates q, rotates k straight into the cache and copies v);
- ``rope_kv_attention`` (decode graphs: one row per sequence): that ``rope_kv_store`` and the
  ``attention`` reading its q become one node (the decode attention kernel rotates q and the step's key
  itself and writes the cache rows; per-head q/k RMS norms too, as weights before the rotation and one
  scale after it), so a decode layer is 5 dispatches. Mixed and teacher-forcing graphs
  keep the two: there a query row needs the keys of the rows before it in the chunk, so the keys must be
  in the cache first.
"""
from __future__ import annotations

from collections import defaultdict
from collections.abc import Callable, Iterable

from .ir import Graph, Node, Value, arg, args


def fuse(graph: Graph) -> Graph:
    """Apply every pattern in order of value; returns ``graph`` with its node list rewritten."""
    nodes = _moe_route(graph, graph.nodes) if graph.decode else graph.nodes
    nodes = _norm_prologue(graph, _glu_epilogue(graph, _multi_matmul(graph, _expert_glu(graph, nodes))))
    nodes = _rope_kv_store(graph, _norm_residual(graph, _residual_epilogue(graph, nodes)))
    nodes = _expert_sum(graph, nodes) if graph.decode else nodes
    graph.nodes = _rope_kv_attention(graph, nodes) if graph.decode else nodes
    return graph


class _View:
    """Who makes and who reads each value of a node list: what the patterns match on."""

    def __init__(self, graph: Graph, nodes: list[Node]):
        self.nodes = nodes
        self.producer = {v: n for n in nodes for v in n.outputs}
        self.readers: dict[Value, list[Node]] = defaultdict(list)
        for n in nodes:
            for v in n.inputs:
                self.readers[v].append(n)
        self._outputs = set(graph.outputs.values())

    def made_by(self, v: Value, op: str) -> Node | None:
        """The node computing ``v`` if it is an ``op``."""
        n = self.producer.get(v)
        return n if n is not None and n.op == op else None

    def single_use(self, v: Value) -> bool:
        """``v`` feeds one node and is no graph output, so a fusion into that node may never write it."""
        return len(self.readers[v]) == 1 and v not in self._outputs


_Fused = tuple[Node, Iterable[Node]]   # the fused node, the nodes it absorbs
_Match = Callable[[Node, _View], _Fused | None]
_Pass = Callable[[Graph, list[Node]], list[Node]]


def _pattern(*ops: str) -> Callable[[_Match], _Pass]:
    """A pass over a node list from ``match(node, view)``, tried on each node whose op is in ``ops``: where it
    returns ``(fused, absorbed)``, ``fused`` takes that node's place and ``absorbed`` goes: a pattern must
    match at a node where every input of the fused node is ready and none of its outputs is read yet."""
    def make(match: _Match) -> _Pass:
        def run(graph: Graph, nodes: list[Node]) -> list[Node]:
            view = _View(graph, nodes)
            replace: dict[Node, Node] = {}
            drop: set[Node] = set()
            for n in nodes:
                if n.op in ops and (m := match(n, view)) is not None:
                    replace[n], absorbed = m
                    drop.update(absorbed)
            return [replace.get(n, n) for n in nodes if n not in drop]
        return run
    return make


@_pattern("matmul")
def _multi_matmul(n: Node, view: _View) -> _Fused | None:
    """Matmuls sharing one input x (all with biases or all without) -> one ``matmul_multi`` at the first."""
    x, bias = arg(n, "x"), arg(n, "bias") is not None
    mms = [m for m in view.readers[x] if m.op == "matmul" and arg(m, "x") is x and (arg(m, "bias") is not None) == bias]
    if len(mms) < 2 or mms[0] is not n:
        return None
    ins = (x, *(arg(m, "w") for m in mms), *(b for m in mms for b in args(m, "bias")))
    return Node("matmul_multi", ins, tuple(m.outputs[0] for m in mms), {"n_w": len(mms)},
                "+".join(m.name for m in mms)), mms[1:]


@_pattern("glu")
def _glu_epilogue(n: Node, view: _View) -> _Fused | None:
    """``glu(gate, up)`` where gate and up are the two outputs of a bias-free ``matmul_multi`` of one
    weight type, read by nothing else -> ``matmul_glu`` at the glu."""
    mm = view.made_by(arg(n, "gate"), "matmul_multi")
    if mm is None or mm.attrs["n_w"] != 2 or args(mm, "bias") or "norm_eps" in mm.attrs \
            or set(mm.outputs) != set(n.inputs) or len({w.ggml_type for w in args(mm, "w")}) != 1 \
            or not all(map(view.single_use, mm.outputs)):
        return None
    w = dict(zip(mm.outputs, args(mm, "w")))
    return Node("matmul_glu", (arg(mm, "x"), w[arg(n, "gate")], w[arg(n, "up")]), n.outputs, dict(n.attrs),
                f"{mm.name}+{n.name}"), (mm,)


@_pattern("glu")
def _expert_glu(n: Node, view: _View) -> _Fused | None:
    """``glu(gate, up)`` of two ``matmul_id`` of one x, one ids and one weight type, read by nothing else ->
    ``matmul_id_glu`` at the glu."""
    g, u = view.made_by(arg(n, "gate"), "matmul_id"), view.made_by(arg(n, "up"), "matmul_id")
    if g is None or u is None or g is u or arg(g, "x") is not arg(u, "x") or arg(g, "ids") is not arg(u, "ids") \
            or arg(g, "w").ggml_type != arg(u, "w").ggml_type or arg(g, "w").shape != arg(u, "w").shape \
            or not (view.single_use(g.outputs[0]) and view.single_use(u.outputs[0])):
        return None
    return Node("matmul_id_glu", (arg(g, "x"), arg(g, "w"), arg(u, "w"), arg(g, "ids")), n.outputs, dict(n.attrs),
                f"{g.name}+{u.name}+{n.name}"), (g, u)


ROUTER_TYPES = (0, 1)
"""Router weight ggml types (F32, F16) ``moe_route``'s kernel reads (llama.cpp never quantizes a router)."""


@_pattern("rms_norm")
def _moe_route(n: Node, view: _View) -> _Fused | None:
    """``rms_norm`` (whole rows, width a multiple of 8) whose output one bias-free router ``matmul`` reads,
    its logits read only by a ``moe_gate`` -> ``moe_route`` at the norm (the normed row stays an output: the
    experts read it)."""
    h, x = n.outputs[0], arg(n, "x")
    routers = [m for m in view.readers[h] if m.op == "matmul" and arg(m, "x") is h and arg(m, "bias") is None]
    if n.attrs["group"] != x.shape[1] or x.shape[1] % 8 or len(routers) != 1:
        return None
    r = routers[0]
    logits = r.outputs[0]
    if arg(r, "w").ggml_type not in ROUTER_TYPES or not view.single_use(logits) \
            or view.readers[logits][0].op != "moe_gate":
        return None
    gate = view.readers[logits][0]
    return Node("moe_route", (x, arg(r, "w"), arg(n, "w")), (h, *gate.outputs), {"eps": n.attrs["eps"], **gate.attrs},
                f"{n.name}+{r.name}+{gate.name}"), (r, gate)


@_pattern("matmul_multi", "matmul_glu")
def _norm_prologue(n: Node, view: _View) -> _Fused | None:
    """``rms_norm`` (whole rows) whose output only a ``matmul_multi``/``matmul_glu`` reads (as x) -> that
    node with attr ``norm_eps``, the norm's input as x and its weight appended."""
    h = arg(n, "x")
    norm = view.made_by(h, "rms_norm")
    if norm is None or "norm_eps" in n.attrs or norm.attrs["group"] != h.shape[1] or not view.single_use(h):
        return None
    return Node(n.op, (arg(norm, "x"), *n.inputs[1:], arg(norm, "w")), n.outputs,
                {**n.attrs, "norm_eps": norm.attrs["eps"]}, f"{norm.name}+{n.name}"), (norm,)


@_pattern("add")
def _residual_epilogue(n: Node, view: _View) -> _Fused | None:
    """``add(r, matmul(h, W))`` whose matmul output feeds only that add -> ``matmul_add`` at the add (and
    ``add(r, moe_sum(y, w))`` -> ``moe_sum_add``)."""
    for mm_val, res in ((n.inputs[1], n.inputs[0]), (n.inputs[0], n.inputs[1])):
        mm = view.made_by(mm_val, "matmul")
        if mm is not None and view.single_use(mm_val):
            return Node("matmul_add", (arg(mm, "x"), arg(mm, "w"), res, *args(mm, "bias")), n.outputs, {},
                        f"{mm.name}+{n.name}"), (mm,)
        ms = view.made_by(mm_val, "moe_sum")
        if ms is not None and view.single_use(mm_val) and res.shape == mm_val.shape:
            return Node("moe_sum_add", (arg(ms, "y"), arg(ms, "w"), res), n.outputs, {},
                        f"{ms.name}+{n.name}"), (ms,)
    return None


@_pattern("add")
def _norm_residual(n: Node, view: _View) -> _Fused | None:
    """``add(r, rms_norm(y, w))`` whose normed value feeds only that add -> ``rms_norm_add`` at the add."""
    for h, res in ((n.inputs[1], n.inputs[0]), (n.inputs[0], n.inputs[1])):
        norm = view.made_by(h, "rms_norm")
        if norm is not None and view.single_use(h) and res.shape == h.shape:
            return Node("rms_norm_add", (arg(norm, "x"), arg(norm, "w"), res), n.outputs, dict(norm.attrs),
                        f"{norm.name}+{n.name}"), (norm,)
    return None


@_pattern("moe_sum_add")
def _expert_sum(n: Node, view: _View) -> _Fused | None:
    """``moe_sum_add(matmul_id(x, W, ids), w, r)`` whose experts' outputs feed only that sum ->
    ``matmul_id_sum_add`` at the sum."""
    mm = view.made_by(arg(n, "y"), "matmul_id")
    if mm is None or not view.single_use(mm.outputs[0]):
        return None
    return Node("matmul_id_sum_add", (*mm.inputs, arg(n, "w"), arg(n, "res")), n.outputs, {},
                f"{mm.name}+{n.name}"), (mm,)


_ROPE_ATTRS = ("head_dim", "n_rot", "base", "neox", "freq_scale")


@_pattern("kv_store")
def _rope_kv_store(n: Node, view: _View) -> _Fused | None:
    """``kv_store(rope(k), v)`` plus a ``rope(q)`` with the same settings (q the one attention reads with
    that cache) -> one ``rope_kv_store`` at the kv_store; the rotated k must feed nothing else."""
    k_val, v_val, cache_k, cache_v = (arg(n, s) for s in ("k", "v", "cache_k", "cache_v"))
    paged = tuple(arg(n, s) for s in ("positions", "row_seq", "block_table"))
    rk = view.made_by(k_val, "rope")
    att = [a for a in view.readers[cache_k] if a.op == "attention"]
    rq = view.made_by(arg(att[0], "q"), "rope") if len(att) == 1 else None
    if rk is None or rq is None or not view.single_use(k_val) \
            or arg(rk, "freq_factors") is not arg(rq, "freq_factors") \
            or any(arg(r, "positions") is not paged[0] for r in (rk, rq)) \
            or any(rk.attrs[a] != rq.attrs[a] for a in _ROPE_ATTRS) \
            or view.nodes.index(rq) > view.nodes.index(n):
        return None
    attrs = {"n_head": rq.attrs["n_head"], "n_head_kv": rk.attrs["n_head"],
             **{a: rk.attrs[a] for a in _ROPE_ATTRS}, "block_size": n.attrs["block_size"]}
    ins = (arg(rq, "x"), arg(rk, "x"), v_val, cache_k, cache_v, *paged, *args(rk, "freq_factors"))
    return Node("rope_kv_store", ins, rq.outputs, attrs, f"{rq.name}+{rk.name}+{n.name}"), (rq, rk)


@_pattern("attention")
def _rope_kv_attention(n: Node, view: _View) -> _Fused | None:
    """``attention(rope_kv_store(q, k, v, K, V, ...), K, V, ...)`` whose rotated q feeds nothing else ->
    ``rope_kv_attention`` at the attention (decode graphs only: one row per sequence, so no query needs
    another row's key of this step first). Per-head ``rms_norm`` of q and k read only by it move in too
    (attr ``qk_norm_eps``, their weights last). f16 caches only: the fused kernel counts the step's own key
    from registers, rounded as the cache stores it, which a block-quantized cache cannot do per value."""
    q = arg(n, "q")
    if any(arg(n, s).dtype != "f16" for s in ("cache_k", "cache_v")):
        return None
    rkv = view.made_by(q, "rope_kv_store")
    same = ("cache_k", "cache_v", "positions", "row_seq", "block_table")
    if rkv is None or any(arg(rkv, s) is not arg(n, s) for s in same) \
            or not view.single_use(q) \
            or any(rkv.attrs[a] != n.attrs[a] for a in ("n_head", "n_head_kv", "head_dim")):
        return None
    ins, attrs, name, absorbed = rkv.inputs, {**rkv.attrs, **n.attrs}, f"{rkv.name}+{n.name}", [rkv]
    norms = [view.made_by(arg(rkv, s), "rms_norm") for s in ("q", "k")]
    if all(m is not None and m.attrs["group"] == n.attrs["head_dim"] and view.single_use(m.outputs[0])
           for m in norms) and norms[0].attrs["eps"] == norms[1].attrs["eps"] and n.attrs["head_dim"] % 4 == 0:
        qn, kn = norms
        ins = (arg(qn, "x"), arg(kn, "x"), *ins[2:], arg(qn, "w"), arg(kn, "w"))
        attrs["qk_norm_eps"] = qn.attrs["eps"]
        name, absorbed = f"{qn.name}+{kn.name}+{name}", [*norms, rkv]
    return Node("rope_kv_attention", ins, n.outputs, attrs, name), absorbed
