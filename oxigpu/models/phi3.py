"""Phi-3: the llama block with NEOX RoPE, q/k/v usually fused in one ``attn_qkv`` projection and the FFN's
gate and up rows fused in ``ffn_up`` (gate first). llama.cpp disables Phi's sliding window, so do we."""
from .family import Family

PHI3 = Family("phi3", rope_neox=True, norm_eps=1e-5, fused_gate_up=True)
