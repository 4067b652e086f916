"""`Family`: everything oxigpu knows about one architecture that the GGUF file does not say.

llama.cpp hard-codes these facts per architecture (``src/models/<arch>.cpp``): which optional pieces a
block has, the RoPE style, the defaults for keys a file may omit, which layers use a sliding window. Here
each architecture states them once, declaratively, in ``models/<arch>.py``; `HParams` applies them to a
file's metadata and the graph builders read nothing else. Adding an architecture is that one file plus
its line in ``models/registry.py``.
"""
from __future__ import annotations

from collections.abc import Callable
from dataclasses import dataclass
from typing import TYPE_CHECKING, Literal

if TYPE_CHECKING:
    from .hparams import HParams


@dataclass(frozen=True)
class LayerAttn:
    """Attention settings that may differ per layer."""

    rope_base: float
    rope_freq_scale: float = 1.0
    window: int = 0          # 0: global causal attention


@dataclass(frozen=True)
class SlidingWindow:
    """Which layers attend through a sliding window, when the file does not list them.

    A file's ``attention.sliding_window_pattern`` (a count, or one flag per layer) overrides ``pattern``.
    """

    pattern: int                       # every pattern-th layer is global (il % pattern == pattern - 1); 0: none is
    window: int | None = None          # the window when the file has no ``attention.sliding_window``
    rope_base: float | None = None     # RoPE base of sliding layers without ``rope.freq_base_swa`` (None: global)
    rope_scaled: bool = True           # sliding layers apply the file's RoPE scaling too


@dataclass(frozen=True)
class Moe:
    """Mixture-of-experts routing: softmax over the router's logits, the top ``expert_used_count``."""

    norm_topk: bool                    # the chosen experts' weights are renormalized to sum to 1
    required: bool = False             # the architecture is MoE only (else: dense unless expert_count > 0)


@dataclass(frozen=True)
class Family:
    """One architecture: what its block contains beyond the llama block, and its defaults."""

    name: str
    rope_neox: bool                          # NEOX (rotate halves) vs normal (rotate pairs) RoPE
    norm_eps: float = 1e-5                   # norm epsilon when the file has none
    rope_base: float = 10000.0               # RoPE base when the file has no ``rope.freq_base``
    qkv_bias: bool = False                   # biases on the q/k/v projections
    qk_norm: Literal["head", "full"] | None = None   # RMS norms on q and k: per head, or over all heads
    pre_norms: bool = True                   # RMS norms on the attention and FFN inputs
    post_norms: bool = False                 # RMS norms on the attention and FFN outputs before the adds
    act: str = "silu"                        # gated-FFN activation
    fused_gate_up: bool = False              # ffn_up.weight holds the gate rows then the up rows (phi3)
    embed_scale: bool = False                # embeddings multiplied by sqrt(n_embd)
    swa: SlidingWindow | None = None         # None: a file's sliding window is ignored (as llama.cpp does)
    softcaps: tuple[float | None, float | None] = (None, None)
    """Soft-caps of (attention scores, final logits): the default when the file has no key; 0.0: the key is
    read but absent means none; None: never applied."""
    attn_scale: Callable[[HParams], float] | None = None   # q.k scale rule (None: 1/sqrt(head_dim))
    moe: Moe | None = None                   # expert routing when the file has experts
    encoder: bool = False                    # bidirectional encoder (embeddings), built by encoder.py
    norm: Literal["rms", "layer"] = "rms"     # RMSNorm or LayerNorm (with bias) throughout
    rope: bool = True                        # rotary positions (else absolute position embeddings)
    gated: bool = True                       # gated FFN act(gate) * up, else act(up) (bert)
    pooling: str = "none"                    # how a text's embedding is pooled when the file does not say
    layer: Callable[[HParams, int], LayerAttn] | None = None   # per-layer rule (None: `standard_layer`)

    def layer_attn(self, hp: HParams, il: int) -> LayerAttn:
        return (self.layer or standard_layer)(hp, il)


def standard_layer(hp: HParams, il: int) -> LayerAttn:
    """Sliding layers use the window and their RoPE base; the others are global with the file's base."""
    if hp.is_sliding(il):
        scale = rope_freq_scale(hp) if hp.family.swa is None or hp.family.swa.rope_scaled else 1.0
        return LayerAttn(hp.rope_base_swa if hp.rope_base_swa is not None else hp.rope_base, scale,
                         hp.sliding_window or 0)
    return LayerAttn(hp.rope_base, rope_freq_scale(hp))


def rope_freq_scale(hp: HParams) -> float:
    """Position multiplier of the file's RoPE scaling: 1/factor for linear, 1 without scaling."""
    if hp.rope_scaling_type == "linear":
        return 1.0 / (hp.rope_scaling_factor or 1.0)
    return 1.0
