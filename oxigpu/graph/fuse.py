"""Fusion: rewrite a Graph so a step needs fewer dispatches (DESIGN.md, "Data flow" item 6).

Each dispatch costs ~7.5 us of GPU time and ~4 us of Python on the H100, so a decode step is bound by
their number on small models. The rewrites keep every original output Value (consumers are untouched)
and each fused op's numpy reference is the composition of the ops it replaces, so a fused graph computes
the same numbers as the unfused one on the numpy backend:

- ``matmul_multi``: matmuls reading the same input (q/k/v; gate/up) become one node (the GPU runs one
  dispatch per distinct weight type);
- ``matmul_glu`` (decode graphs, T == 1): a gate/up ``matmul_multi`` of one weight type followed by
  ``glu`` becomes one GEMV storing act(x Wg) * (x Wu);
- ``matmul_add``: ``add(r, matmul(h, W))`` becomes a matmul with the residual added in its epilogue
  (attn_output, ffn_down; where gemma3's post-norm sits between them, nothing is fused);
- norm prologue (decode graphs): an ``rms_norm`` over whole rows read only by a ``matmul_multi`` or
  ``matmul_glu`` moves into it (attr ``norm_eps``, the norm weight as its last input): each GEMV
  workgroup recomputes the row's sum of squares, cheap for d <= 4096;
- ``rope_kv_store``: ``rope(q)``, ``rope(k)`` and the ``kv_store`` of that k become one node (one
  dispatch rotates q, rotates k straight into the cache and copies v);
- ``rope_kv_attention`` (decode graphs): that ``rope_kv_store`` and the ``attention`` reading its q
  become one node (the decode attention kernel rotates q and the step's key itself and writes the cache
  rows), so a decode layer is 5 dispatches. Prefill graphs keep the two: there every query row needs
  the keys of the rows before it in the chunk, so the keys must be in the cache first.
"""
from __future__ import annotations

from collections import defaultdict

from .ir import Graph, Node, Value


def fuse(graph: Graph) -> Graph:
    """Apply every pattern in order of value; returns ``graph`` with its node list rewritten."""
    nodes = _multi_matmul(graph.nodes)
    if graph.T == 1:
        nodes = _norm_prologue(graph, _glu_epilogue(graph, nodes))
    nodes = _rope_kv_store(graph, _residual_epilogue(graph, nodes))
    graph.nodes = _rope_kv_attention(graph, nodes) if graph.T == 1 else nodes
    return graph


def _readers(nodes: list[Node]) -> dict[Value, list[Node]]:
    readers: dict[Value, list[Node]] = defaultdict(list)
    for n in nodes:
        for v in n.inputs:
            readers[v].append(n)
    return readers


def _multi_matmul(nodes: list[Node]) -> list[Node]:
    """Matmuls sharing one input x (all with biases or all without) -> one ``matmul_multi`` at the first."""
    groups: dict[tuple[Value, bool], list[Node]] = defaultdict(list)
    for n in nodes:
        if n.op == "matmul":
            groups[(n.inputs[0], len(n.inputs) > 2)].append(n)
    fused: dict[Node, Node | None] = {}
    for (x, _), mms in groups.items():
        if len(mms) < 2:
            continue
        ins = (x, *(m.inputs[1] for m in mms), *(b for m in mms for b in m.inputs[2:]))
        node = Node("matmul_multi", ins, tuple(m.outputs[0] for m in mms), {"n_w": len(mms)},
                    "+".join(m.name for m in mms))
        fused |= {m: None for m in mms}
        fused[mms[0]] = node
    return [fused.get(n, n) for n in nodes if fused.get(n, n) is not None]


def _glu_epilogue(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``glu(gate, up)`` where gate and up are the two outputs of a bias-free ``matmul_multi`` of one
    weight type, read by nothing else -> ``matmul_glu`` at the glu."""
    readers = _readers(nodes)
    outputs = set(graph.outputs.values())
    producer = {v: n for n in nodes for v in n.outputs}
    drop: set[Node] = set()
    replace: dict[Node, Node] = {}
    for n in nodes:
        mm = producer.get(n.inputs[0]) if n.op == "glu" else None
        if mm is None or mm.op != "matmul_multi" or len(mm.inputs) != 3 or set(mm.outputs) != set(n.inputs) \
                or mm.inputs[1].ggml_type != mm.inputs[2].ggml_type \
                or any(len(readers[v]) != 1 or v in outputs for v in mm.outputs):
            continue
        w = dict(zip(mm.outputs, mm.inputs[1:]))
        replace[n] = Node("matmul_glu", (mm.inputs[0], w[n.inputs[0]], w[n.inputs[1]]), n.outputs,
                          dict(n.attrs), f"{mm.name}+{n.name}")
        drop.add(mm)
    return [replace.get(n, n) for n in nodes if n not in drop]


def _norm_prologue(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``rms_norm`` (whole rows) whose output only a ``matmul_multi``/``matmul_glu`` reads (as x) -> that
    node with attr ``norm_eps``, the norm's input as x and its weight appended."""
    readers = _readers(nodes)
    outputs = set(graph.outputs.values())
    producer = {v: n for n in nodes for v in n.outputs}
    drop: set[Node] = set()
    replace: dict[Node, Node] = {}
    for n in nodes:
        if n.op not in ("matmul_multi", "matmul_glu") or "norm_eps" in n.attrs:
            continue
        norm = producer.get(n.inputs[0])
        h = n.inputs[0]
        if norm is None or norm.op != "rms_norm" or norm.attrs["group"] != h.shape[1] \
                or len(readers[h]) != 1 or h in outputs:
            continue
        replace[n] = Node(n.op, (norm.inputs[0], *n.inputs[1:], norm.inputs[1]), n.outputs,
                          {**n.attrs, "norm_eps": norm.attrs["eps"]}, f"{norm.name}+{n.name}")
        drop.add(norm)
    return [replace.get(n, n) for n in nodes if n not in drop]


def _residual_epilogue(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``add(r, matmul(h, W))`` whose matmul output feeds only that add -> ``matmul_add`` at the add."""
    readers = _readers(nodes)
    outputs = set(graph.outputs.values())
    producer = {v: n for n in nodes for v in n.outputs}
    drop: set[Node] = set()
    replace: dict[Node, Node] = {}
    for n in nodes:
        if n.op != "add":
            continue
        for mm_val, res in ((n.inputs[1], n.inputs[0]), (n.inputs[0], n.inputs[1])):
            mm = producer.get(mm_val)
            if mm is not None and mm.op == "matmul" and mm not in drop and len(readers[mm_val]) == 1 \
                    and mm_val not in outputs:
                x, w, *bias = mm.inputs
                replace[n] = Node("matmul_add", (x, w, res, *bias), n.outputs, {}, f"{mm.name}+{n.name}")
                drop.add(mm)
                break
    return [replace.get(n, n) for n in nodes if n not in drop]


_ROPE_ATTRS = ("head_dim", "n_rot", "base", "neox", "freq_scale")


def _rope_kv_store(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``kv_store(rope(k), v)`` plus a ``rope(q)`` with the same settings (q the one attention reads with
    that cache) -> one ``rope_kv_store`` at the kv_store; the rotated k must feed nothing else."""
    readers = _readers(nodes)
    outputs = set(graph.outputs.values())
    producer = {v: n for n in nodes for v in n.outputs}
    drop: set[Node] = set()
    replace: dict[Node, Node] = {}
    for n in nodes:
        if n.op != "kv_store":
            continue
        k_val, v_val, cache_k, cache_v = n.inputs
        rk = producer.get(k_val)
        att = [a for a in readers[cache_k] if a.op == "attention"]
        rq = producer.get(att[0].inputs[0]) if len(att) == 1 else None
        if rk is None or rq is None or rk.op != "rope" or rq.op != "rope" or len(readers[k_val]) != 1 \
                or k_val in outputs or rk.inputs[1:] != rq.inputs[1:] \
                or any(rk.attrs[a] != rq.attrs[a] for a in _ROPE_ATTRS) \
                or nodes.index(rq) > nodes.index(n):
            continue
        attrs = {"n_head": rq.attrs["n_head"], "n_head_kv": rk.attrs["n_head"],
                 **{a: rk.attrs[a] for a in _ROPE_ATTRS}}
        ins = (rq.inputs[0], rk.inputs[0], v_val, cache_k, cache_v, *rk.inputs[1:])
        replace[n] = Node("rope_kv_store", ins, rq.outputs, attrs, f"{rq.name}+{rk.name}+{n.name}")
        drop |= {rq, rk}
    return [replace.get(n, n) for n in nodes if n not in drop]


def _rope_kv_attention(graph: Graph, nodes: list[Node]) -> list[Node]:
    """``attention(rope_kv_store(q, k, v, K, V), K, V)`` whose rotated q feeds nothing else ->
    ``rope_kv_attention`` at the attention (decode graphs only: its kernel handles one query row)."""
    readers = _readers(nodes)
    outputs = set(graph.outputs.values())
    producer = {v: n for n in nodes for v in n.outputs}
    drop: set[Node] = set()
    replace: dict[Node, Node] = {}
    for n in nodes:
        rkv = producer.get(n.inputs[0]) if n.op == "attention" else None
        if rkv is None or rkv.op != "rope_kv_store" or rkv.inputs[3:5] != n.inputs[1:3] \
                or len(readers[n.inputs[0]]) != 1 or n.inputs[0] in outputs \
                or any(rkv.attrs[a] != n.attrs[a] for a in ("n_head", "n_head_kv", "head_dim")):
            continue
        replace[n] = Node("rope_kv_attention", rkv.inputs, n.outputs, {**rkv.attrs, **n.attrs},
                          f"{rkv.name}+{n.name}")
        drop.add(rkv)
    return [replace.get(n, n) for n in nodes if n not in drop]
