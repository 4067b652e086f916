"""Gemma 2: embeddings scaled by sqrt(n_embd), GELU-tanh gated FFN, RMS norms before and after attention
and the FFN, NEOX RoPE, soft-capped attention scores (50) and final logits (30) unless the file says
otherwise, and a 4096-token sliding window on every other layer (even layers; the file may change both).
The 27B (46 layers) scales q.k by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim)."""
import math

from .family import Family, SlidingWindow


def query_pre_attn_scale(big_layers: int):
    """Gemma's query_pre_attn_scalar: head_dim, except n_embd / n_head on the model with ``big_layers``
    layers (llama.cpp keys it on the layer count, as we do)."""
    def rule(hp) -> float:
        return 1.0 / math.sqrt(hp.n_embd // hp.n_head if hp.n_layer == big_layers else hp.head_dim)
    return rule


GEMMA2 = Family("gemma2", rope_neox=True, norm_eps=1e-6, post_norms=True, act="gelu_tanh", embed_scale=True,
                softcaps=(50.0, 30.0), attn_scale=query_pre_attn_scale(46),
                swa=SlidingWindow(pattern=2, window=4096))
