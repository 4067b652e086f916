"""Qwen3 (dense): the llama block with per-head RMS norms on q and k before NEOX RoPE, no biases."""
from .transformer import Family

QWEN3 = Family("qwen3", rope_neox=True, qk_norm=True)
