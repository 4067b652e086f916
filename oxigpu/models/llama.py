"""Llama 2/3 and Mistral: the plain block (GQA, SwiGLU), normal-mode RoPE with optional llama-3.1
frequency factors (``rope_freqs.weight``), LM head untied or tied to the embeddings. llama.cpp reads no
sliding window for this architecture, so neither do we."""
from .family import Family

LLAMA = Family("llama", rope_neox=False, norm_eps=1e-5, rope_base=10000.0)
