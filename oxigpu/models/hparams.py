"""Hyperparameters of a decoder-only model, read once from GGUF metadata.

Every model builder and `oxigpu info` use this one object, so the rules for defaults and for facts that
llama.cpp hard-codes instead of storing in the file (gemma3's sliding-window pattern, its local RoPE base,
its embedding scale) live in one place.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import asdict, dataclass
from typing import Any

from ..errors import GGUFFormatError, UnsupportedArchitectureError

SUPPORTED_ARCHS = ("llama", "qwen2", "qwen3", "gemma3")

# gemma3 facts that llama.cpp hard-codes (llama-model.cpp, LLM_ARCH_GEMMA3): every 6th layer is global,
# the others use a sliding window with their own RoPE base.
GEMMA3_SWA_PATTERN = 6
GEMMA3_DEFAULT_WINDOW = 512
GEMMA3_LOCAL_ROPE_BASE = 10000.0

_DEFAULT_EPS = {"llama": 1e-5, "qwen2": 1e-6, "qwen3": 1e-6, "gemma3": 1e-6}
_DEFAULT_ROPE_BASE = {"llama": 10000.0, "qwen2": 10000.0, "qwen3": 1000000.0, "gemma3": 1000000.0}


@dataclass(frozen=True)
class HParams:
    """What a builder needs to lay out one architecture's graph (per-layer facts via methods)."""

    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int            # key/query head size (`attention.key_length`, default n_embd / n_head)
    head_dim_v: int          # value head size (`attention.value_length`, default head_dim)
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    rms_eps: float
    rope_base: float         # the file's freq_base; on gemma3 this is the global layers' base
    rope_dims: int           # rotated dims per head (partial rotary when < head_dim)
    rope_neox: bool          # NEOX-style (rotate halves) vs GPT-J-style (rotate pairs)
    rope_scaling_type: str | None
    rope_scaling_factor: float | None
    rope_scaling_orig_ctx: int | None
    rope_freq_factors: bool  # a `rope_freqs.weight` tensor (llama 3.1+ long-context scaling) is present
    rope_base_local: float | None          # RoPE base of sliding-window layers (gemma3), else None
    sliding_window: int | None
    sliding_window_pattern: int | None     # every Nth layer is global (gemma3: 6)
    attn_logit_softcap: float | None
    final_logit_softcap: float | None
    tied_embeddings: bool    # no `output.weight`: the LM head reuses `token_embd.weight`
    qkv_bias: bool           # q/k/v projections carry biases (qwen2)
    qk_norm: bool            # per-head RMS norm on q and k (qwen3, gemma3)
    post_norms: bool         # extra RMS norms after attention and after the FFN (gemma3)
    activation: str          # gated-FFN activation: "silu" or "gelu_tanh"
    embed_scale: float       # token embeddings are multiplied by this (gemma3: sqrt(n_embd))
    attn_scale: float        # q.k scale, 1/sqrt(head_dim) for all supported archs

    @property
    def n_gqa(self) -> int:
        """Query heads per KV head."""
        return self.n_head // self.n_head_kv

    def is_sliding(self, layer: int) -> bool:
        """Whether `layer` attends through the sliding window (False for global layers)."""
        if self.sliding_window is None or self.sliding_window_pattern is None:
            return False
        return (layer + 1) % self.sliding_window_pattern != 0

    def layer_rope_base(self, layer: int) -> float:
        """RoPE base of `layer`: local layers of gemma3 use their own base."""
        if self.rope_base_local is not None and self.is_sliding(layer):
            return self.rope_base_local
        return self.rope_base

    def to_dict(self) -> dict[str, Any]:
        return asdict(self)

    @classmethod
    def from_metadata(cls, arch: str, metadata: Mapping[str, Any],
                      tensor_names: Iterable[str] | None = None) -> HParams:
        """Read `arch`'s hyperparameters from a GGUF metadata mapping.

        `tensor_names` decides what only the tensor list can tell (tied LM head, RoPE frequency factors);
        without it the LM head counts as tied only for gemma3, which always ties it.
        """
        if arch not in SUPPORTED_ARCHS:
            raise UnsupportedArchitectureError(
                f"architecture {arch!r} is not supported; supported: {', '.join(SUPPORTED_ARCHS)}")
        names = set(tensor_names) if tensor_names is not None else None

        def key(k: str) -> str:
            return f"{arch}.{k}"

        def get(k: str, default: Any = None, required: bool = False) -> Any:
            if key(k) in metadata:
                return _scalar(metadata[key(k)], key(k))
            if required:
                raise GGUFFormatError("required hyperparameter is missing", field=key(k))
            return default

        n_embd = int(get("embedding_length", required=True))
        n_head = int(get("attention.head_count", required=True))
        n_head_kv = int(get("attention.head_count_kv", n_head))
        if n_head <= 0 or n_head_kv <= 0 or n_head % n_head_kv:
            raise GGUFFormatError(f"head counts {n_head}/{n_head_kv} do not divide",
                                  field=key("attention.head_count_kv"))
        head_dim = int(get("attention.key_length", n_embd // n_head))
        head_dim_v = int(get("attention.value_length", head_dim))
        n_vocab = get("vocab_size")
        if n_vocab is None:
            tokens = metadata.get("tokenizer.ggml.tokens")
            if not isinstance(tokens, list):   # an array of numbers, a string, a number: not a vocabulary
                raise GGUFFormatError("neither vocab_size nor a tokenizer.ggml.tokens list of strings is present",
                                      field=key("vocab_size"))
            n_vocab = len(tokens)
        scaling_type = get("rope.scaling.type")
        scaling_type = None if scaling_type in (None, "none") else _text(scaling_type)
        factor = get("rope.scaling.factor")
        orig_ctx = get("rope.scaling.original_context_length")
        gemma = arch == "gemma3"
        window = get("attention.sliding_window", GEMMA3_DEFAULT_WINDOW if gemma else None)
        # Qwen2 files may carry a sliding window that llama.cpp ignores; only gemma3 uses it.
        window = int(window) if gemma and window else None
        attn_cap = get("attn_logit_softcapping")
        final_cap = get("final_logit_softcapping")
        return cls(
            arch=arch,
            n_layer=int(get("block_count", required=True)),
            n_embd=n_embd,
            n_head=n_head,
            n_head_kv=n_head_kv,
            head_dim=head_dim,
            head_dim_v=head_dim_v,
            n_ff=int(get("feed_forward_length", required=True)),
            n_vocab=int(n_vocab),
            n_ctx_train=int(get("context_length", required=True)),
            rms_eps=float(get("attention.layer_norm_rms_epsilon", _DEFAULT_EPS[arch])),
            rope_base=float(get("rope.freq_base", _DEFAULT_ROPE_BASE[arch])),
            rope_dims=int(get("rope.dimension_count", head_dim)),
            rope_neox=arch != "llama",
            rope_scaling_type=scaling_type,
            rope_scaling_factor=float(factor) if factor is not None else None,
            rope_scaling_orig_ctx=int(orig_ctx) if orig_ctx is not None else None,
            rope_freq_factors=names is not None and "rope_freqs.weight" in names,
            rope_base_local=GEMMA3_LOCAL_ROPE_BASE if window else None,
            sliding_window=window,
            sliding_window_pattern=GEMMA3_SWA_PATTERN if window else None,
            attn_logit_softcap=float(attn_cap) if attn_cap else None,
            final_logit_softcap=float(final_cap) if final_cap else None,
            tied_embeddings=gemma if names is None else "output.weight" not in names,
            qkv_bias=arch == "qwen2",
            qk_norm=arch in ("qwen3", "gemma3"),
            post_norms=gemma,
            activation="gelu_tanh" if gemma else "silu",
            embed_scale=math.sqrt(n_embd) if gemma else 1.0,
            attn_scale=1.0 / math.sqrt(head_dim),
        )

    @classmethod
    def from_gguf(cls, gguf_file: Any) -> HParams:
        """From an opened `oxigpu.gguf.GGUFFile` (metadata plus its tensor list)."""
        meta = gguf_file.metadata
        arch = meta.get("general.architecture")
        if arch is None:
            raise GGUFFormatError("missing", field="general.architecture")
        return cls.from_metadata(_text(arch), meta, gguf_file.tensors.keys())


def _text(v: Any) -> str:
    return v.decode("utf-8") if isinstance(v, (bytes, bytearray)) else str(v)


def _scalar(v: Any, field: str) -> Any:
    """A metadata value as a Python scalar; per-layer arrays are accepted only when uniform."""
    if isinstance(v, (str, bytes, bytearray)):
        return _text(v)
    if hasattr(v, "__len__"):
        values = list(v)
        if not values or any(x != values[0] for x in values):
            raise GGUFFormatError("per-layer values differ; only uniform layers are supported", field=field)
        v = values[0]
    return v.item() if hasattr(v, "item") else v
