"""Llama 2/3 and Mistral: the plain block (GQA, SwiGLU), normal-mode RoPE with optional llama-3.1
frequency factors (``rope_freqs.weight``), LM head untied or tied to the embeddings."""
from .transformer import Family

LLAMA = Family("llama", rope_neox=False)
