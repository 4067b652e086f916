"""The decoder-only transformer shared by every supported family.

A family is a `Family`: which optional pieces its block has (llama.cpp hard-codes these per
architecture in ``src/models/*.cpp``) plus a rule giving each layer's attention settings. `decoder` lays
the whole model out for a step of T rows of up to S sequences (graph/ir.py: each row has its position and
sequence slot; K/V go to the paged cache through each slot's block table):

    x = embed(tokens) * embed_scale
    per layer:  h = attn_norm(x); q, k, v = h Wq (+bq), h Wk (+bk), h Wv (+bv)
                [q, k = per-head q_norm(q), k_norm(k)]; q, k = rope(q), rope(k)
                cache <- k, v; a = attention(q, cache) Wo; [a = post_attention_norm(a)]; x = x + a
                h = ffn_norm(x); f = (act(h Wgate) * h Wup) Wdown; [f = post_ffw_norm(f)]; x = x + f
    logits = output_norm(x) Woutput   (Woutput = token_embd when the head is tied; of each sequence's last
                                       row, or of every row for teacher forcing)
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import Literal

from ..errors import GGUFFormatError, UnsupportedArchitectureError
from ..graph.ir import KV_BLOCK, Graph, Value
from ..quant import get_type
from .hparams import HParams


@dataclass(frozen=True)
class LayerAttn:
    """Attention settings that may differ per layer."""

    rope_base: float
    rope_freq_scale: float = 1.0
    window: int = 0          # 0: global causal attention


def uniform_layers(hp: HParams, il: int) -> LayerAttn:
    """Every layer global, with the file's RoPE base and (linear) RoPE scaling."""
    return LayerAttn(hp.rope_base, rope_freq_scale(hp))


def rope_freq_scale(hp: HParams) -> float:
    """Position multiplier of the file's RoPE scaling: 1/factor for linear, 1 without scaling."""
    if hp.rope_scaling_type is None:
        return 1.0
    if hp.rope_scaling_type == "linear":
        return 1.0 / (hp.rope_scaling_factor or 1.0)
    raise UnsupportedArchitectureError(
        f"{hp.arch}: RoPE scaling {hp.rope_scaling_type!r} is not supported (only linear)")


@dataclass(frozen=True)
class Family:
    """What a block of this architecture contains beyond the llama block."""

    name: str
    rope_neox: bool              # NEOX (rotate halves) vs normal (rotate pairs) RoPE
    qkv_bias: bool = False       # biases on the q/k/v projections
    qk_norm: bool = False        # per-head RMS norms on q and k before RoPE
    post_norms: bool = False     # RMS norms on the attention and FFN outputs before the residual add
    act: str = "silu"            # gated-FFN activation
    embed_scale: bool = False    # embeddings multiplied by sqrt(n_embd)
    layer: Callable[[HParams, int], LayerAttn] = uniform_layers


class _Weights:
    """Graph weight values for the file's tensors, checked for presence, shape and type."""

    def __init__(self, g: Graph, model):
        self.g, self.model = g, model

    def __contains__(self, name: str) -> bool:
        return name in self.model.tensors

    def __call__(self, name: str, shape: tuple[int, ...]) -> Value:
        t = self.model.tensors.get(name)
        if t is None:
            raise GGUFFormatError("required tensor is missing", path=str(self.model.path), field=name)
        if tuple(t.shape) != tuple(shape):
            raise GGUFFormatError(f"shape {tuple(t.shape)} != expected {tuple(shape)}",
                                  path=str(self.model.path), field=name, offset=t.offset)
        get_type(t.ggml_type)  # UnsupportedQuantTypeError names the type and the supported ones
        return self.g.weight(name, tuple(shape), t.ggml_type)


def decoder(fam: Family, model, hp: HParams, T: int, n_ctx: int,
            logits: Literal["last", "all"] = "last", *, S: int = 1, n_blocks: int | None = None,
            decode: bool = False) -> Graph:
    """The graph of a family's decoder for a step of T rows of up to S sequences, each of up to n_ctx
    tokens, over a cache pool of ``n_blocks`` blocks (default: S full contexts). ``logits`` "last": each
    sequence's last row ([S, vocab]); "all": every row ([T, vocab]). ``decode``: one row per sequence (T ==
    S), so the last rows need no gather."""
    if logits not in ("last", "all"):
        raise ValueError(f"logits must be 'last' or 'all', got {logits!r}")
    mb = -(-n_ctx // KV_BLOCK)
    n_blocks = S * mb if n_blocks is None else n_blocks
    g = Graph(T, S, decode)
    W = _Weights(g, model)
    d, vocab = hp.n_embd, hp.n_vocab
    x = g.embed(g.input("tokens", (T,)), W("token_embd.weight", (vocab, d)),
                d ** 0.5 if fam.embed_scale else 1.0)
    paged = _Paged(g.input("positions", (T,)), g.input("row_seq", (T,)), g.input("block_table", (S, mb)),
                   n_blocks * KV_BLOCK)
    freq_factors = (W("rope_freqs.weight", (hp.rope_dims // 2,))
                    if "rope_freqs.weight" in W else None)
    for il in range(hp.n_layer):
        g.scope(f"blk.{il}")
        x = _block(g, W, fam, hp, il, x, paged, freq_factors)
    g.scope("")
    if logits == "last" and not decode:
        x = g.gather_rows(x, g.input("out_rows", (S,)))  # norm and head are row-wise: last rows only
    x = g.rms_norm(x, W("output_norm.weight", (d,)), hp.rms_eps, name="output_norm")
    head = "output.weight" if "output.weight" in W else "token_embd.weight"
    g.output("logits", g.matmul(x, W(head, (vocab, d)), name="output"))
    return g


@dataclass(frozen=True)
class _Paged:
    """The step inputs that place rows in the paged cache, and its rows per layer."""

    positions: Value
    row_seq: Value
    block_table: Value
    rows: int


def _block(g: Graph, W: _Weights, fam: Family, hp: HParams, il: int, x: Value, paged: _Paged,
           freq_factors: Value | None) -> Value:
    p, d, eps = f"blk.{il}.", hp.n_embd, hp.rms_eps
    H, Hkv, D, Dv = hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v
    la = fam.layer(hp, il)

    def proj(name: str, n_out: int) -> Value:
        bias = W(p + name + ".bias", (n_out,)) if fam.qkv_bias else None
        return g.matmul(h, W(p + name + ".weight", (n_out, d)), bias, name=name)

    h = g.rms_norm(x, W(p + "attn_norm.weight", (d,)), eps, name="attn_norm")
    q, k, v = proj("attn_q", H * D), proj("attn_k", Hkv * D), proj("attn_v", Hkv * Dv)
    if fam.qk_norm:
        q = g.rms_norm(q, W(p + "attn_q_norm.weight", (D,)), eps, group=D, name="attn_q_norm")
        k = g.rms_norm(k, W(p + "attn_k_norm.weight", (D,)), eps, group=D, name="attn_k_norm")
    pos, at = paged.positions, (paged.positions, paged.row_seq, paged.block_table)
    q = g.rope(q, pos, H, D, hp.rope_dims, la.rope_base, fam.rope_neox, la.rope_freq_scale, freq_factors,
               name="rope_q")
    k = g.rope(k, pos, Hkv, D, hp.rope_dims, la.rope_base, fam.rope_neox, la.rope_freq_scale, freq_factors,
               name="rope_k")
    cache_k = g.state(f"cache_k.{il}", (paged.rows, Hkv * D))
    cache_v = g.state(f"cache_v.{il}", (paged.rows, Hkv * Dv))
    g.kv_store(k, v, cache_k, cache_v, *at)
    a = g.attention(q, cache_k, cache_v, *at, H, Hkv, D, Dv, hp.attn_scale, la.window)
    a = g.matmul(a, W(p + "attn_output.weight", (d, H * Dv)), name="attn_output")
    if fam.post_norms:
        a = g.rms_norm(a, W(p + "post_attention_norm.weight", (d,)), eps, name="post_attention_norm")
    x = g.add(x, a, name="attn_residual")

    h = g.rms_norm(x, W(p + "ffn_norm.weight", (d,)), eps, name="ffn_norm")
    gate = g.matmul(h, W(p + "ffn_gate.weight", (hp.n_ff, d)), name="ffn_gate")
    up = g.matmul(h, W(p + "ffn_up.weight", (hp.n_ff, d)), name="ffn_up")
    f = g.matmul(g.glu(gate, up, fam.act, name="ffn_act"), W(p + "ffn_down.weight", (d, hp.n_ff)),
                 name="ffn_down")
    if fam.post_norms:
        f = g.rms_norm(f, W(p + "post_ffw_norm.weight", (d,)), eps, name="post_ffw_norm")
    return g.add(x, f, name="ffn_residual")
