"""Qwen2 / Qwen2.5: the llama block with biases on the q/k/v projections and NEOX RoPE."""
from .transformer import Family

QWEN2 = Family("qwen2", rope_neox=True, qkv_bias=True)
