"""Qwen3 (dense): the llama block with per-head RMS norms on q and k before NEOX RoPE, no biases."""
from .family import Family

QWEN3 = Family("qwen3", rope_neox=True, norm_eps=1e-6, rope_base=1e6, qk_norm="head")
