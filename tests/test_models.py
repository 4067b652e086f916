"""Model builders: dispatch, errors, and the per-family graph structure that llama.cpp hard-codes."""
from __future__ import annotations

import dataclasses
import math

import pytest

from oxigpu.errors import UnsupportedArchitectureError, UnsupportedQuantTypeError
from oxigpu.gguf import GGUFFile
from oxigpu.models import FAMILIES, build_graph

SHAPES = ["tiny-llama", "tiny-qwen2", "tiny-qwen3", "tiny-gemma3"]


@pytest.fixture(scope="module")
def models(tmp_path_factory):
    from oxigpu.synth import synthesize
    d = tmp_path_factory.mktemp("synth")
    return {s: GGUFFile(synthesize(s, d / f"{s}.gguf", ftype="Q4_K_M", seed=11, workers=1).path) for s in SHAPES}


def ops_named(g, suffix):
    return [n for n in g.nodes if n.name.endswith(suffix)]


@pytest.mark.parametrize("shape", SHAPES)
@pytest.mark.parametrize("logits,rows", [("last", 1), ("all", 6)])
def test_inputs_and_outputs(models, shape, logits, rows):
    m = models[shape]
    g = build_graph(m, None, 6, 32, logits)
    vocab = len(m.metadata["tokenizer.ggml.tokens"])
    assert g.inputs["tokens"].shape == (6,) and g.inputs["tokens"].dtype == "i32"
    assert g.outputs["logits"].shape == (rows, vocab)
    n_layer = m.metadata[f"{m.arch}.block_count"]
    assert len(g.states) == 2 * n_layer
    head = g.nodes[-1].inputs[1].tensor
    assert head == ("output.weight" if "output.weight" in m.tensors else "token_embd.weight")


def test_family_details(models):
    llama = build_graph(models["tiny-llama"], None, 2, 32, fuse=False)
    assert all(not n.attrs["neox"] for n in llama.nodes if n.op == "rope")
    assert all(len(n.inputs) == 2 for n in ops_named(llama, "attn_q"))  # no biases

    qwen2 = build_graph(models["tiny-qwen2"], None, 2, 32, fuse=False)
    assert all(len(n.inputs) == 3 for name in ("attn_q", "attn_k", "attn_v") for n in ops_named(qwen2, name))
    assert all(n.attrs["neox"] for n in qwen2.nodes if n.op == "rope")

    qwen3 = build_graph(models["tiny-qwen3"], None, 2, 32, fuse=False)
    qn = ops_named(qwen3, "attn_q_norm")
    assert qn and all(n.attrs["group"] == 64 for n in qn)  # per-head norm
    assert not ops_named(qwen3, "post_attention_norm")

    m = models["tiny-gemma3"]
    gemma = build_graph(m, None, 2, 32, fuse=False)
    assert gemma.nodes[0].attrs["scale"] == pytest.approx(math.sqrt(320))
    att = [n for n in gemma.nodes if n.op == "attention"]
    assert [n.attrs["window"] for n in att] == [16] * 5 + [0]
    assert all(n.attrs["scale"] == pytest.approx(1 / 8) for n in att)  # 1/sqrt(head_dim 64)
    bases = [n.attrs["base"] for n in ops_named(gemma, "rope_q")]
    assert bases == [10000.0] * 5 + [1e6]
    assert all(n.attrs["act"] == "gelu_tanh" for n in gemma.nodes if n.op == "glu")
    assert len(ops_named(gemma, "post_attention_norm")) == len(ops_named(gemma, "post_ffw_norm")) == 6


def test_unsupported_architecture(models):
    m = models["tiny-llama"]

    class Other:  # a file whose general.architecture names a family we do not build
        arch, tensors, metadata, path = "mamba", m.tensors, m.metadata, m.path
    with pytest.raises(UnsupportedArchitectureError, match="mamba.*" + ".*".join(FAMILIES)):
        build_graph(Other(), None, 1, 32)


def test_unsupported_tensor_type(models):
    m = models["tiny-llama"]

    class Patched:
        arch, metadata, path = m.arch, m.metadata, m.path
        tensors = dict(m.tensors)
    name = "blk.1.ffn_up.weight"
    Patched.tensors[name] = dataclasses.replace(m.tensors[name], ggml_type=39)  # MXFP4
    with pytest.raises(UnsupportedQuantTypeError, match="MXFP4"):
        build_graph(Patched(), None, 1, 32)


def test_graphs_are_deterministic(models):
    a, b = (build_graph(models["tiny-gemma3"], None, 3, 32, "all") for _ in range(2))
    assert [(n.op, n.name, n.attrs) for n in a.nodes] == [(n.op, n.name, n.attrs) for n in b.nodes]
    assert [v.shape for v in a.values] == [v.shape for v in b.values]
