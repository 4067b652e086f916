"""Gemma 3: embeddings scaled by sqrt(n_embd), per-head q/k norms, GELU-tanh gated FFN, extra RMS norms
after attention and after the FFN (norm weights in the file already include gemma's +1), NEOX RoPE, an
optional final-logit soft-cap, and interleaved attention when the file has a sliding window: every 6th
layer (il % 6 == 5) is global with the file's RoPE base and scaling, the others see the window with RoPE
base 10000 and no scaling (llama.cpp hard-codes the pattern and the base). The 27B (62 layers) scales q.k
by 1/sqrt(n_embd / n_head) instead of 1/sqrt(head_dim)."""
from .family import Family, SlidingWindow
from .gemma2 import query_pre_attn_scale

GEMMA3 = Family("gemma3", rope_neox=True, norm_eps=1e-6, rope_base=1e6, qk_norm="head", post_norms=True,
                act="gelu_tanh", embed_scale=True, softcaps=(None, 0.0), attn_scale=query_pre_attn_scale(62),
                swa=SlidingWindow(pattern=6, rope_base=10000.0, rope_scaled=False))
