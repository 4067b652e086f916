"""The decoder-only transformer shared by every decoder family.

A family is a `Family` (``family.py``): which optional pieces its block has (llama.cpp hard-codes these
per architecture in ``src/models/*.cpp``) plus the rule giving each layer's RoPE base and window.
`decoder` lays the whole model out for a step of T rows of up to S sequences (graph/ir.py: each row has its
position and sequence slot; K/V go to the paged cache through each slot's block table):

    x = embed(tokens) * embed_scale
    per layer:  h = [attn_norm](x)
                q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)    (or one fused Wqkv, split)
                [q, k = q_norm(q), k_norm(k): per head or over all heads]; q, k = rope(q), rope(k)
                cache <- k, v; a = attention(q, cache; window, soft-cap) Wo
                x = x + residual_scale * [post_attention_norm](a)
                h = [ffn_norm](x)
                f = (act(h Wgate) * h Wup) Wdown                 (fused gate/up: one Wup, split)
                    or, with experts: the router's top-k experts' FFNs, mixed by its weights
                x = x + residual_scale * [post_ffw_norm](f)
    logits = soft-cap(output_norm(x) Woutput / logit_scale)  (Woutput = token_embd when the head is tied;
             of each sequence's last row, or of every row for teacher forcing)

Which projections are fused, and which optional biases exist, follows the tensors the file holds; the
rest follows the family. ``tensor_list`` runs the same code against a recorder to list the tensors a
file must hold (what ``oxigpu synth`` writes).
"""
from __future__ import annotations

import re
from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..errors import GGUFFormatError
from ..graph.ir import KV_BLOCK, Graph, Value
from ..quant import get_type
from .family import Family
from .hparams import HParams


class _Weights:
    """Graph weight values for the file's tensors, checked for presence, shape and type; a mismatch names
    the hyperparameters the expected shape comes from."""

    def __init__(self, g: Graph, model, hp: HParams):
        self.g, self.model, self.hp = g, model, hp

    def __contains__(self, name: str) -> bool:
        return name in self.model.tensors

    def __call__(self, name: str, shape: tuple[int, ...], *sized_by: str) -> Value:
        """The weight ``name`` of numpy shape ``shape``; ``sized_by`` names the HParams fields the shape
        comes from, so a mismatch names their GGUF keys and values."""
        t = self.model.tensors.get(name)
        if t is None:
            layer = re.match(r"blk\.(\d+)\.", name)
            why = f" (the file's {self.hp.arch}.block_count is {self.hp.n_layer})" if layer else ""
            raise GGUFFormatError(f"required tensor is missing{why}", path=str(self.model.path), field=name)
        if tuple(t.shape) != tuple(shape):
            raise GGUFFormatError(f"shape {tuple(t.shape)} != expected {tuple(shape)} from "
                                  f"{self.hp.explain(sized_by)}", path=str(self.model.path), field=name,
                                  offset=t.offset)
        get_type(t.ggml_type)  # UnsupportedQuantTypeError names the type and the supported ones
        return self.g.weight(name, tuple(shape), t.ggml_type)


_SIZED_BY = ("n_embd", "n_head", "n_head_kv", "head_dim", "head_dim_v")
"""What attention weights' and norms' shapes depend on."""


class _Recorder(_Weights):
    """Stands in for a file: answers "is this optional tensor there" from ``present`` and records every
    tensor the builder reads, with its shape."""

    def __init__(self, g: Graph, present: Callable[[str], bool]):
        self.g, self.present, self.read = g, present, {}
        self.hp = None

    def __contains__(self, name: str) -> bool:
        return self.present(name)

    def __call__(self, name: str, shape: tuple[int, ...], *sized_by: str) -> Value:
        self.read.setdefault(name, tuple(shape))
        return self.g.weight(name, tuple(shape), 0)


def tensor_list(hp: HParams, present: Callable[[str], bool]) -> list[tuple[str, tuple[int, ...]]]:
    """The tensors (name, numpy shape) a file of ``hp`` must hold, in the order the builder reads them;
    ``present(name)`` says which optional ones it has. What ``oxigpu synth`` writes."""
    from .encoder import encoder
    rec: dict[str, _Recorder] = {}

    def weights(g: Graph, _model, _hp) -> _Recorder:
        rec["r"] = _Recorder(g, present)
        return rec["r"]
    (encoder if hp.family.encoder else decoder)(hp.family, None, hp, 1, 8, "last", weights=weights)
    return list(rec["r"].read.items())


def decoder(fam: Family, model, hp: HParams, T: int, n_ctx: int,
            logits: Literal["last", "all", "hidden"] = "last",
            weights: Callable[[Graph, object, HParams], _Weights] = _Weights, *, S: int = 1,
            n_blocks: int | None = None, decode: bool = False, cache_types: tuple[str, str] = ("f16", "f16")
            ) -> Graph:
    """The graph of a family's decoder for a step of T rows of up to S sequences, each of up to n_ctx
    tokens, over a cache pool of ``n_blocks`` blocks (default: S full contexts). ``logits`` "last": each
    sequence's last row ([S, vocab]); "all": every row ([T, vocab]); "hidden": every row's final hidden
    state. ``decode``: one row per sequence (T == S), so the last rows need no gather. ``weights`` makes the
    graph's view of the file's tensors (the synth planner records instead). ``cache_types``: the K and V
    caches' types (graph/ir.py: f16, q8_0, q4_0)."""
    if logits not in ("last", "all", "hidden"):
        raise ValueError(f"logits must be 'last', 'all' or 'hidden', got {logits!r}")
    mb = -(-n_ctx // KV_BLOCK)
    n_blocks = S * mb if n_blocks is None else n_blocks
    g = Graph(T, S, decode)
    W = weights(g, model, hp)
    d, vocab = hp.n_embd, hp.n_vocab
    x = g.embed(g.input("tokens", (T,)), W("token_embd.weight", (vocab, d), "n_vocab", "n_embd"), hp.embed_scale)
    paged = _Paged(g.input("positions", (T,)), g.input("row_seq", (T,)), g.input("block_table", (S, mb)),
                   n_blocks * KV_BLOCK, tuple(cache_types))
    freq_factors = (W("rope_freqs.weight", (hp.rope_dims // 2,), "rope_dims")
                    if "rope_freqs.weight" in W else None)
    for il in range(hp.n_layer):
        g.scope(f"blk.{il}")
        x = _block(g, W, fam, hp, il, x, paged, freq_factors)
    g.scope("")
    if logits == "last" and not decode:
        x = g.gather_rows(x, g.input("out_rows", (S,)))  # norm and head are row-wise: last rows only
    x = g.rms_norm(x, W("output_norm.weight", (d,), "n_embd"), hp.norm_eps, name="output_norm")
    if logits == "hidden":       # embeddings from a decoder: every row's final hidden state
        g.output("hidden", x)
        return g
    head = "output.weight" if "output.weight" in W else "token_embd.weight"
    y = g.matmul(x, W(head, (vocab, d), "n_vocab", "n_embd"), name="output")
    if hp.logit_scale != 1.0 or hp.final_logit_softcap:
        y = g.scale(y, 1.0 / hp.logit_scale, hp.final_logit_softcap or 0.0, name="logit_scale")
    g.output("logits", y)
    return g


@dataclass(frozen=True)
class _Paged:
    """The step inputs that place rows in the paged cache, and its rows per layer."""

    positions: Value
    row_seq: Value
    block_table: Value
    rows: int
    cache_types: tuple[str, str] = ("f16", "f16")


def _block(g: Graph, W: _Weights, fam: Family, hp: HParams, il: int, x: Value, paged: _Paged,
           freq_factors: Value | None) -> Value:
    p, d, eps = f"blk.{il}.", hp.n_embd, hp.norm_eps

    def norm(v: Value, name: str, width: int = d, group: int | None = None) -> Value:
        return g.rms_norm(v, W(p + name + ".weight", (group or width,), *_SIZED_BY), eps, group=group, name=name)

    def residual(x: Value, branch: Value, post_norm: str, name: str) -> Value:
        if fam.post_norms:
            branch = norm(branch, post_norm)
        if hp.residual_scale != 1.0:
            branch = g.scale(branch, hp.residual_scale, name=name + "_scale")
        return g.add(x, branch, name=name)

    h = norm(x, "attn_norm") if fam.pre_norms else x
    x = residual(x, _attention(g, W, fam, hp, il, h, paged, freq_factors, norm), "post_attention_norm",
                 "attn_residual")
    h = norm(x, "ffn_norm") if fam.pre_norms else x
    return residual(x, _ffn(g, W, fam, hp, p, h), "post_ffw_norm", "ffn_residual")


def _attention(g: Graph, W: _Weights, fam: Family, hp: HParams, il: int, h: Value, paged: _Paged,
               freq_factors: Value | None, norm: Callable[..., Value]) -> Value:
    p, d = f"blk.{il}.", hp.n_embd
    H, Hkv, D, Dv = hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v
    la = fam.layer_attn(hp, il)
    sizes = (H * D, Hkv * D, Hkv * Dv)
    if p + "attn_qkv.weight" in W:    # one fused projection (phi3, nomic-bert, some converters)
        w = W(p + "attn_qkv.weight", (sum(sizes), d), *_SIZED_BY)
        bias = W(p + "attn_qkv.bias", (sum(sizes),), *_SIZED_BY) if p + "attn_qkv.bias" in W else None
        q, k, v = g.split(g.matmul(h, w, bias, name="attn_qkv"), sizes, name="attn_qkv_split")
    else:
        def proj(name: str, n_out: int) -> Value:
            w = W(p + name + ".weight", (n_out, d), *_SIZED_BY)
            bias = W(p + name + ".bias", (n_out,), *_SIZED_BY) if fam.qkv_bias else None
            return g.matmul(h, w, bias, name=name)
        q, k, v = (proj(n, s) for n, s in zip(("attn_q", "attn_k", "attn_v"), sizes))
    if fam.qk_norm == "head":
        q, k = norm(q, "attn_q_norm", group=D), norm(k, "attn_k_norm", group=D)
    elif fam.qk_norm == "full":
        q, k = norm(q, "attn_q_norm", H * D), norm(k, "attn_k_norm", Hkv * D)
    pos, at = paged.positions, (paged.positions, paged.row_seq, paged.block_table)
    q = g.rope(q, pos, H, D, hp.rope_dims, la.rope_base, fam.rope_neox, la.rope_freq_scale, freq_factors,
               name="rope_q")
    k = g.rope(k, pos, Hkv, D, hp.rope_dims, la.rope_base, fam.rope_neox, la.rope_freq_scale, freq_factors,
               name="rope_k")
    cache_k = g.state(f"cache_k.{il}", (paged.rows, Hkv * D), paged.cache_types[0])
    cache_v = g.state(f"cache_v.{il}", (paged.rows, Hkv * Dv), paged.cache_types[1])
    g.kv_store(k, v, cache_k, cache_v, *at)
    a = g.attention(q, cache_k, cache_v, *at, H, Hkv, D, Dv, hp.attn_scale, la.window,
                    hp.attn_logit_softcap or 0.0)
    return g.matmul(a, W(p + "attn_output.weight", (d, H * Dv), *_SIZED_BY), name="attn_output")


def _ffn(g: Graph, W: _Weights, fam: Family, hp: HParams, p: str, h: Value) -> Value:
    d, n_ff = hp.n_embd, hp.n_ff
    if hp.n_expert:
        return _moe_ffn(g, W, fam, hp, p, h)
    if fam.fused_gate_up:             # ffn_up holds gate then up (phi3)
        gu = g.matmul(h, W(p + "ffn_up.weight", (2 * n_ff, d), "n_ff", "n_embd"), name="ffn_up")
        gate, up = g.split(gu, (n_ff, n_ff), name="ffn_gate_up_split")
    else:
        gate = g.matmul(h, W(p + "ffn_gate.weight", (n_ff, d), "n_ff", "n_embd"), name="ffn_gate")
        up = g.matmul(h, W(p + "ffn_up.weight", (n_ff, d), "n_ff", "n_embd"), name="ffn_up")
    return g.matmul(g.glu(gate, up, fam.act, name="ffn_act"), W(p + "ffn_down.weight", (d, n_ff), "n_ff", "n_embd"),
                    name="ffn_down")


def _moe_ffn(g: Graph, W: _Weights, fam: Family, hp: HParams, p: str, h: Value) -> Value:
    """Mixture of experts: the router picks ``n_expert_used`` experts per row; only their gate/up/down
    matrices are multiplied (``matmul_id``), and their outputs are mixed by the router's weights."""
    d, E, nf = hp.n_embd, hp.n_expert, hp.n_ff_exp
    dims = ("n_expert", "n_ff_exp", "n_embd")
    logits = g.matmul(h, W(p + "ffn_gate_inp.weight", (E, d), "n_expert", "n_embd"), name="ffn_gate_inp")
    ids, weights = g.moe_gate(logits, hp.n_expert_used, fam.moe.norm_topk, hp.expert_weights_scale,
                              name="ffn_moe_gate")
    gate = g.matmul_id(h, W(p + "ffn_gate_exps.weight", (E, nf, d), *dims), ids, name="ffn_gate_exps")
    up = g.matmul_id(h, W(p + "ffn_up_exps.weight", (E, nf, d), *dims), ids, name="ffn_up_exps")
    y = g.matmul_id(g.glu(gate, up, fam.act, name="ffn_moe_act"),
                    W(p + "ffn_down_exps.weight", (E, d, nf), *dims), ids, name="ffn_down_exps")
    return g.moe_sum(y, weights, name="ffn_moe_sum")
