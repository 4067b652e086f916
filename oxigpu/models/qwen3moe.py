"""Qwen3-MoE: Qwen3's attention (per-head q/k norms, NEOX RoPE) with mixture-of-experts FFNs on every
layer: softmax router, top ``expert_used_count`` experts, their weights renormalized to sum to 1."""
from .family import Family, Moe

QWEN3MOE = Family("qwen3moe", rope_neox=True, norm_eps=1e-6, rope_base=1e6, qk_norm="head",
                  moe=Moe(norm_topk=True, required=True))
