"""graph.plan.compile: dataflow checks, lifetimes, and arena packing (no live overlap, reuse happens)."""
from __future__ import annotations

import itertools

import pytest

from oxigpu.graph.ir import Graph
from oxigpu.graph.plan import ALIGN, Plan, compile


def chain_graph(T: int = 3, d: int = 40, n_layer: int = 4) -> Graph:
    """A llama-like stack on made-up weights (the builder checks shapes, no file needed): T rows of up to 2
    sequences over a 16-row paged cache."""
    g = Graph(T, 2)
    x = g.embed(g.input("tokens", (T,)), g.weight("emb", (100, d), 0))
    pos, seq, bt = g.input("positions", (T,)), g.input("row_seq", (T,)), g.input("block_table", (2, 1))
    for il in range(n_layer):
        g.scope(f"blk.{il}")
        h = g.rms_norm(x, g.weight(f"n{il}", (d,), 0), 1e-6)
        q = g.rope(g.matmul(h, g.weight(f"q{il}", (d, d), 0)), pos, 4, d // 4, d // 4, 1e4, True)
        k = g.rope(g.matmul(h, g.weight(f"k{il}", (d // 2, d), 0)), pos, 2, d // 4, d // 4, 1e4, True)
        v = g.matmul(h, g.weight(f"v{il}", (d // 2, d), 0))
        K, V = g.state(f"K{il}", (32, d // 2)), g.state(f"V{il}", (32, d // 2))
        g.kv_store(k, v, K, V, pos, seq, bt)
        a = g.attention(q, K, V, pos, seq, bt, 4, 2, d // 4, d // 4, 0.5)
        x = g.add(x, g.matmul(a, g.weight(f"o{il}", (d, d), 0)))
        f = g.glu(g.matmul(x, g.weight(f"g{il}", (3 * d, d), 0)), g.matmul(x, g.weight(f"u{il}", (3 * d, d), 0)),
                  "silu")
        x = g.add(x, g.matmul(f, g.weight(f"d{il}", (d, 3 * d), 0)))
    g.scope("")
    g.output("logits", g.matmul(g.gather_rows(x, g.input("out_rows", (2,))), g.weight("emb", (100, d), 0)))
    return g


def assert_no_live_overlap(plan: Plan) -> None:
    for a, b in itertools.combinations(plan.offsets, 2):
        (a0, a1), (b0, b1) = plan.live[a], plan.live[b]
        if a0 <= b1 and b0 <= a1:  # lifetimes overlap (inclusive node ranges)
            oa, ob = plan.offsets[a], plan.offsets[b]
            assert oa + a.nbytes <= ob or ob + b.nbytes <= oa, f"{a} and {b} share bytes while both live"


def test_every_temp_placed_aligned_and_inside_the_arena():
    plan = compile(chain_graph())
    temps = [v for n in plan.nodes for v in n.outputs]
    assert set(plan.offsets) == set(temps)
    for v, off in plan.offsets.items():
        assert off % ALIGN == 0 and off + v.nbytes <= plan.arena_size
    assert plan.arena_size % ALIGN == 0


@pytest.mark.parametrize("T,d,n_layer", [(1, 40, 2), (3, 40, 4), (17, 24, 3)])
def test_live_buffers_never_overlap_and_memory_is_reused(T, d, n_layer):
    plan = compile(chain_graph(T, d, n_layer))
    assert_no_live_overlap(plan)
    total = sum(-(-v.nbytes // ALIGN) * ALIGN for v in plan.offsets)
    assert plan.arena_size < total / 3, "deeper stacks must reuse freed buffers"
    # a layer's activations are dead once the next layer has read the residual: the arena is
    # independent of depth
    assert plan.arena_size == compile(chain_graph(T, d, n_layer + 3)).arena_size


def test_outputs_live_to_the_end_and_never_alias_inputs():
    plan = compile(chain_graph())
    logits = plan.outputs["logits"]
    assert plan.live[logits][1] == len(plan.nodes)
    for node in plan.nodes:
        for o in node.outputs:
            for i in node.inputs:
                if i in plan.offsets:
                    oi, oo = plan.offsets[i], plan.offsets[o]
                    assert oi + i.nbytes <= oo or oo + o.nbytes <= oi, f"{node} writes over its input"


def test_weights_states_and_order():
    g = chain_graph(n_layer=2)
    plan = compile(g)
    assert plan.nodes == g.nodes and plan.T == 3
    assert [w.name for w in plan.weights][:3] == ["emb", "n0", "q0"]  # "emb" is shared by the LM head
    assert len(plan.weights) == 1 + 2 * 8
    assert [s.name for s in plan.states] == ["K0", "V0", "K1", "V1"]


def test_reading_a_value_before_it_is_written_is_rejected():
    g = chain_graph(n_layer=1)
    g.nodes[2], g.nodes[3] = g.nodes[3], g.nodes[2]  # the q rope before the q matmul
    with pytest.raises(ValueError, match="before any node writes it"):
        compile(g)


def test_attention_before_its_cache_is_written_is_rejected():
    g = chain_graph(n_layer=1)
    i = next(i for i, n in enumerate(g.nodes) if n.op == "kv_store")
    g.nodes[i], g.nodes[i + 1] = g.nodes[i + 1], g.nodes[i]
    with pytest.raises(ValueError, match="reads state"):
        compile(g)


def test_op_spec_resolves_repeats_and_optional_inputs():
    """graph/ir.py's OPS: repeated weight slots expand by n_w, biases are all or none, the norm prologue's
    weight is there exactly when norm_eps is, and inputs that fit no layout are refused."""
    from oxigpu.graph.ir import input_slots
    names = lambda op, attrs, n: [s.name for s in input_slots(op, attrs, n)]  # noqa: E731
    assert names("matmul_multi", {"n_w": 3}, 4) == ["x", "w", "w", "w"]
    assert names("matmul_multi", {"n_w": 3}, 7) == ["x", "w", "w", "w", "bias", "bias", "bias"]
    assert names("matmul_multi", {"n_w": 2, "norm_eps": 1e-6}, 4) == ["x", "w", "w", "norm_w"]
    assert names("matmul_glu", {"act": "silu"}, 3) == ["x", "w_gate", "w_up"]
    assert names("rope_kv_store", {}, 9)[-1] == "freq_factors" and names("rope_kv_store", {}, 8)[-1] == "block_table"
    assert [s.writes for s in input_slots("kv_store", {}, 7)] == [False, False, True, True, False, False, False]
    for op, attrs, n in (("matmul_multi", {"n_w": 3}, 5), ("matmul", {}, 4), ("add", {}, 1), ("nope", {}, 1)):
        with pytest.raises(ValueError):
            input_slots(op, attrs, n)


def test_a_node_that_does_not_fit_its_op_spec_is_rejected():
    g = chain_graph(n_layer=1)
    mm = next(n for n in g.nodes if n.op == "matmul")
    mm.inputs = (mm.inputs[1], mm.inputs[0])       # a weight where the activation goes
    with pytest.raises(ValueError, match="input 'x' is a weight value"):
        compile(g)
