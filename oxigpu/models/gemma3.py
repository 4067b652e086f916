"""Gemma 3: embeddings scaled by sqrt(n_embd), per-head q/k norms, GELU-tanh gated FFN, extra RMS norms
after attention and after the FFN (norm weights in the file already include gemma's +1), NEOX RoPE,
q.k scaled by 1/sqrt(head_dim) (query_pre_attn_scalar), and interleaved attention: every
``sliding_window_pattern``-th layer (il % 6 == 5) is global with the file's RoPE base and scaling, the
others see a ``sliding_window`` of keys with RoPE base 10000 and no scaling (llama.cpp hard-codes both)."""
from .hparams import HParams
from .transformer import Family, LayerAttn, rope_freq_scale


def gemma3_layer(hp: HParams, il: int) -> LayerAttn:
    if hp.is_sliding(il):
        return LayerAttn(hp.layer_rope_base(il), 1.0, hp.sliding_window or 0)
    return LayerAttn(hp.rope_base, rope_freq_scale(hp))


GEMMA3 = Family("gemma3", rope_neox=True, qk_norm=True, post_norms=True, act="gelu_tanh", embed_scale=True,
                layer=gemma3_layer)
