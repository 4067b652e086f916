"""Qwen2 / Qwen2.5: the llama block with biases on the q/k/v projections and NEOX RoPE. Files may carry a
sliding window that llama.cpp ignores; so do we (no ``swa``)."""
from .family import Family

QWEN2 = Family("qwen2", rope_neox=True, norm_eps=1e-6, rope_base=10000.0, qkv_bias=True)
