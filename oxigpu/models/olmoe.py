"""OLMoE: the llama block with RMS norms on q and k over all heads, NEOX RoPE, and mixture-of-experts FFNs:
softmax router, top ``expert_used_count`` experts weighted by their probabilities as they are (not
renormalized)."""
from .family import Family, Moe

OLMOE = Family("olmoe", rope_neox=True, norm_eps=1e-5, qk_norm="full", moe=Moe(norm_topk=False, required=True))
