"""Llama 2/3, Mistral and Mixtral: the plain block (GQA, SwiGLU), normal-mode RoPE with optional llama-3.1
frequency factors (``rope_freqs.weight``), LM head untied or tied to the embeddings, an optional
``attention.scale``. A file with ``expert_count`` > 0 has mixture-of-experts FFNs (Mixtral: softmax over
the router's logits, top-k, renormalized). A file with ``attention.sliding_window`` gets Mistral's
sliding-window attention on every layer (pattern 0; a file's ``attention.sliding_window_pattern``
overrides): llama.cpp ignores that key for this architecture, and its converters never write it, so real
files run the same as there."""
from .family import Family, Moe, SlidingWindow

LLAMA = Family("llama", rope_neox=False, norm_eps=1e-5, rope_base=10000.0, moe=Moe(norm_topk=True),
               swa=SlidingWindow(pattern=0))
