"""The bidirectional encoder shared by BERT-style embedding families (bert, nomic-bert).

    x = LayerNorm(embed(tokens) [+ token_types[0]] [+ position_embd[pos]])
    per layer:  q, k, v = x Wq (+b), x Wk (+b), x Wv (+b)   (or one fused Wqkv)
                [q, k = rope(q), rope(k)]; a = attention over every row of the chunk, Wo (+b)
                x = LayerNorm(x + a);  f = act(x Wup (+b)) Wdown (+b)  or  (act(x Wgate) * x Wup) Wdown
                x = LayerNorm(x + f)
    output "hidden" [T, d]: one row per token; pooling (mean, CLS, last) happens on the host.

There is no cache: a text is encoded in one step (its tokens are one chunk), so every row sees every row.
Token types are always 0 ("sentence A"), as in llama.cpp.
"""
from __future__ import annotations

from collections.abc import Callable

from ..graph.ir import Graph, Value
from .family import Family
from .hparams import HParams
from .transformer import _SIZED_BY, _Weights


def encoder(fam: Family, model, hp: HParams, T: int, n_ctx: int, logits: str = "hidden",
            weights: Callable[[Graph, object, HParams], _Weights] = _Weights) -> Graph:
    """The graph for one text of up to T tokens (input ``positions``: 0..T-1); output ``hidden`` [T, n_embd]."""
    g = Graph(T)
    W = weights(g, model, hp)
    d, eps = hp.n_embd, hp.norm_eps

    def ln(v: Value, name: str) -> Value:
        return g.layer_norm(v, W(name + ".weight", (d,), "n_embd"), W(name + ".bias", (d,), "n_embd"), eps,
                            name=name.split(".")[-1])

    def bias(name: str, n: int, field: str) -> Value | None:
        return W(name, (n,), field) if name in W else None

    x = g.embed(g.input("tokens", (T,)), W("token_embd.weight", (hp.n_vocab, d), "n_vocab", "n_embd"), 1.0)
    pos = g.input("positions", (T,))
    if hp.n_token_types and "token_types.weight" in W:
        x = g.add_rows(x, W("token_types.weight", (hp.n_token_types, d), "n_token_types", "n_embd"), 0,
                       name="token_types")
    if not fam.rope:
        x = g.add_rows(x, W("position_embd.weight", (hp.n_ctx_train, d), "n_ctx_train", "n_embd"), -1, pos,
                       name="position_embd")
    x = ln(x, "token_embd_norm")
    H, Hkv, D, Dv = hp.n_head, hp.n_head_kv, hp.head_dim, hp.head_dim_v
    sizes = (H * D, Hkv * D, Hkv * Dv)
    for il in range(hp.n_layer):
        g.scope(f"blk.{il}")
        p = f"blk.{il}."
        if p + "attn_qkv.weight" in W:
            qkv = g.matmul(x, W(p + "attn_qkv.weight", (sum(sizes), d), *_SIZED_BY),
                           bias(p + "attn_qkv.bias", sum(sizes), "n_embd"), name="attn_qkv")
            q, k, v = g.split(qkv, sizes, name="attn_qkv_split")
        else:
            q, k, v = (g.matmul(x, W(p + n + ".weight", (s, d), *_SIZED_BY), bias(p + n + ".bias", s, "n_embd"),
                                name=n) for n, s in zip(("attn_q", "attn_k", "attn_v"), sizes))
        if fam.rope:
            q = g.rope(q, pos, H, D, hp.rope_dims, hp.rope_base, fam.rope_neox, name="rope_q")
            k = g.rope(k, pos, Hkv, D, hp.rope_dims, hp.rope_base, fam.rope_neox, name="rope_k")
        a = g.attention_self(q, k, v, H, Hkv, D, Dv, hp.attn_scale)
        a = g.matmul(a, W(p + "attn_output.weight", (d, H * Dv), *_SIZED_BY), bias(p + "attn_output.bias", d, "n_embd"),
                     name="attn_output")
        x = ln(g.add(x, a, name="attn_residual"), p + "attn_output_norm")
        n_ff = hp.n_ff
        up = g.matmul(x, W(p + "ffn_up.weight", (n_ff, d), "n_ff", "n_embd"), bias(p + "ffn_up.bias", n_ff, "n_ff"),
                      name="ffn_up")
        if fam.gated:
            gate = g.matmul(x, W(p + "ffn_gate.weight", (n_ff, d), "n_ff", "n_embd"), name="ffn_gate")
            h = g.glu(gate, up, fam.act, name="ffn_act")
        else:
            h = g.act(up, fam.act, name="ffn_act")
        f = g.matmul(h, W(p + "ffn_down.weight", (d, n_ff), "n_ff", "n_embd"), bias(p + "ffn_down.bias", d, "n_embd"),
                     name="ffn_down")
        x = ln(g.add(x, f, name="ffn_residual"), p + "layer_output_norm")
    g.scope("")
    g.output("hidden", x)
    return g
