"""Named model shapes for synthetic GGUF files: real ones (for speed work) and tiny ones (for tests).

Real shapes copy the published config of the model each is named after (layer count, widths, heads, vocab,
RoPE; ``label`` is that model's size label, as its GGUF files carry it) so a synthetic file costs exactly
what the real model costs to run. Tiny shapes keep every architecture feature but are small enough for
unit tests; their widths are chosen so that some rows are multiples of 256 (K-quant blocks) and some are
not (llama.cpp falls back to 32-element blocks there).
"""
from __future__ import annotations

import fnmatch
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InvalidParameterError


@dataclass(frozen=True)
class Shape:
    """One model shape plus its tokenizer flavour; `vocab` names a style in `synth.vocab`."""

    name: str
    arch: str
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    n_ff: int
    n_vocab: int
    head_dim: int
    n_ctx_train: int
    rope_base: float
    rms_eps: float
    tied: bool
    vocab: str                        # a style of synth.vocab: "spm-llama2", "bpe-qwen2" ...
    chat_template: bool = True
    sliding_window: int | None = None
    rope_scaling_factor: float | None = None   # llama3-style frequency factors, written as rope_freqs.weight
    label: str = ""
    extra: tuple[tuple[str, Any], ...] = ()   # more `{arch}.` keys (experts, soft-caps, scales ...), in order
    tensors: tuple[str, ...] = ()             # optional tensors the file has (fnmatch patterns: fused QKV ...)

    def has_tensor(self, name: str) -> bool:
        """Whether the file holds the optional tensor `name` (the builder asks before reading it)."""
        if name == "output.weight":
            return not self.tied
        if name == "rope_freqs.weight":
            return self.rope_scaling_factor is not None
        return any(fnmatch.fnmatchcase(name, p) for p in self.tensors)

    def with_layers(self, n_layer: int | None) -> Shape:
        """The same shape cut to `n_layer` layers (to make big shapes cheap to write and load)."""
        if n_layer is None:
            return self
        if n_layer < 1:
            raise InvalidParameterError(f"--layers must be >= 1, got {n_layer}")
        return replace(self, n_layer=n_layer)


def llama_keys(head_dim: int, n_vocab: int) -> tuple[tuple[str, Any], ...]:
    """Keys llama.cpp's converter writes for llama files only."""
    return (("rope.dimension_count", head_dim), ("vocab_size", n_vocab))


SHAPES: dict[str, Shape] = {s.name: s for s in (
    # tied embeddings; like the real Q4_K_M package file, no chat template.
    Shape("gemma3-270m", "gemma3", 18, 640, 4, 1, 2048, 262144, 256, 32768, 1e6, 1e-6, True,
          "spm-gemma", chat_template=False, sliding_window=512, label="270M"),
    # the instruct model's config: tied embeddings.
    Shape("qwen2.5-0.5b", "qwen2", 24, 896, 14, 2, 4864, 151936, 64, 32768, 1e6, 1e-6, True,
          "bpe-qwen2", label="0.5B"),
    # Qwen2.5-Coder-1.5B-Instruct's config (the speculative target): tied embeddings, 12 query heads over 2
    # KV heads of 128.
    Shape("qwen2.5-1.5b", "qwen2", 28, 1536, 12, 2, 8960, 151936, 128, 32768, 1e6, 1e-6, True,
          "bpe-qwen2", label="1.5B"),
    # the instruct model's config: tied embeddings, llama3 RoPE scaling factor 32.
    Shape("llama-3.2-1b", "llama", 16, 2048, 32, 8, 8192, 128256, 64, 131072, 500000.0, 1e-5, True,
          "bpe-llama3", rope_scaling_factor=32.0, label="1B", extra=llama_keys(64, 128256)),
    # the instruct model's config: untied embeddings, llama3 RoPE scaling factor 8.
    Shape("llama-3.1-8b", "llama", 32, 4096, 32, 8, 14336, 128256, 128, 131072, 500000.0, 1e-5, False,
          "bpe-llama3", rope_scaling_factor=8.0, label="8B", extra=llama_keys(128, 128256)),
    # the instruct model's config: tied embeddings, 9 query heads over 3 KV heads (rows of 576: not a
    # multiple of 256).
    Shape("smollm2-135m", "llama", 30, 576, 9, 3, 1536, 49152, 64, 8192, 100000.0, 1e-5, True,
          "bpe-qwen2", label="135M", extra=llama_keys(64, 49152)),
    # the mixture-of-experts config: 128 experts of width 768, 8 per token, q/k norms, untied.
    Shape("qwen3moe-30b-a3b", "qwen3moe", 48, 2048, 32, 4, 6144, 151936, 128, 40960, 1e6, 1e-6, False,
          "bpe-qwen2", label="30B-A3B", extra=(("expert_count", 128), ("expert_used_count", 8),
                                               ("expert_feed_forward_length", 768))),
    # Tiny shapes: rows of 192/640/320 are not multiples of 256, rows of 256/512/768 are.
    Shape("tiny-llama", "llama", 2, 192, 6, 2, 512, 1024, 32, 2048, 10000.0, 1e-5, False,
          "spm-llama2", label="tiny", extra=llama_keys(32, 1024)),
    Shape("tiny-qwen2", "qwen2", 3, 256, 4, 2, 640, 1536, 64, 4096, 1e6, 1e-6, True,
          "bpe-qwen2", label="tiny"),
    Shape("tiny-qwen3", "qwen3", 2, 128, 4, 2, 384, 1280, 64, 4096, 1e6, 1e-6, False,
          "bpe-qwen2", label="tiny"),
    Shape("tiny-gemma3", "gemma3", 6, 320, 4, 1, 768, 1024, 64, 4096, 1e6, 1e-6, True,
          "spm-gemma", sliding_window=16, label="tiny"),
    # Mistral-style: the llama block with a sliding window on every layer.
    Shape("tiny-mistral", "llama", 2, 192, 6, 2, 512, 1024, 32, 4096, 10000.0, 1e-5, False,
          "spm-llama2", sliding_window=16, label="tiny", extra=llama_keys(32, 1024)),
    # Phi-3: fused q/k/v and gate/up projections.
    Shape("tiny-phi3", "phi3", 2, 192, 6, 2, 320, 1024, 32, 4096, 10000.0, 1e-5, False,
          "spm-phi3", label="tiny", tensors=("blk.*.attn_qkv.weight",)),
    # Gemma 2: soft-caps, pre and post norms, a window on even layers.
    Shape("tiny-gemma2", "gemma2", 4, 256, 4, 2, 640, 1024, 64, 4096, 10000.0, 1e-6, True,
          "spm-gemma", sliding_window=16, label="tiny",
          extra=(("attn_logit_softcapping", 50.0), ("final_logit_softcapping", 30.0))),
    # OLMo 2: post-norms only, q/k norms over all heads.
    Shape("tiny-olmo2", "olmo2", 2, 256, 4, 4, 640, 1536, 64, 4096, 500000.0, 1e-6, False,
          "bpe-qwen2", label="tiny"),
    # Granite 3: embedding, attention, residual and logit multipliers.
    Shape("tiny-granite", "granite", 2, 256, 4, 2, 512, 1536, 64, 4096, 10000.0, 1e-5, True,
          "bpe-qwen2", label="tiny", extra=(("embedding_scale", 12.0), ("residual_scale", 0.22),
                                            ("logit_scale", 4.0), ("attention.scale", 0.015625))),
    # Mixtral-style: llama with 8 experts, 2 per token.
    Shape("tiny-mixtral", "llama", 2, 192, 6, 2, 256, 1024, 32, 4096, 1e6, 1e-5, False,
          "spm-llama2", label="tiny", extra=llama_keys(32, 1024) + (("expert_count", 8), ("expert_used_count", 2))),
    # Qwen3-MoE: 16 experts of width 128, 4 per token, renormalized.
    Shape("tiny-qwen3moe", "qwen3moe", 2, 256, 4, 2, 768, 1536, 64, 4096, 1e6, 1e-6, False,
          "bpe-qwen2", label="tiny", extra=(("expert_count", 16), ("expert_used_count", 4),
                                            ("expert_feed_forward_length", 128))),
    # OLMoE: 8 experts, 2 per token, weights not renormalized.
    Shape("tiny-olmoe", "olmoe", 2, 256, 4, 4, 320, 1536, 64, 4096, 10000.0, 1e-5, False,
          "bpe-qwen2", label="tiny", extra=(("expert_count", 8), ("expert_used_count", 2))),
    # BERT encoder (embeddings): absolute positions, GELU FFN, biases everywhere, CLS pooling.
    Shape("tiny-bert", "bert", 2, 128, 4, 4, 512, 1024, 32, 512, 10000.0, 1e-12, True, "wpm-bert",
          chat_template=False, label="tiny", extra=(("pooling_type", 2), ("attention.causal", False)),
          tensors=("token_types.weight", "blk.*.attn_output.bias", "blk.*.ffn_up.bias", "blk.*.ffn_down.bias")),
    # nomic-bert encoder: RoPE, fused q/k/v, SwiGLU, mean pooling.
    Shape("tiny-nomic-bert", "nomic-bert", 2, 192, 6, 6, 384, 1024, 32, 2048, 1000.0, 1e-12, True, "wpm-bert",
          chat_template=False, label="tiny", extra=(("pooling_type", 1), ("attention.causal", False)),
          tensors=("token_types.weight", "blk.*.attn_qkv.weight")),
)}


def get_shape(name: str) -> Shape:
    try:
        return SHAPES[name]
    except KeyError:
        raise InvalidParameterError(
            f"unknown shape {name!r}; known: {', '.join(SHAPES)}") from None
