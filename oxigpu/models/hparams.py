"""Hyperparameters of a model, read once from GGUF metadata and validated as values.

`HParams.from_metadata` is the one place a file's numbers are checked: every key is read with its type, its
range and the relations shapes need (head counts that divide, even head sizes for RoPE and the f16 cache,
windows and experts within the layer and expert counts), so a hostile or broken file fails at load with a
`GGUFFormatError` naming the key and the value, never later inside a kernel or at generation. Facts the
file does not state (defaults, hard-coded layer patterns) come from the architecture's `Family`; this
module knows no architecture by name.
"""
from __future__ import annotations

import math
from collections.abc import Iterable, Mapping
from dataclasses import dataclass, fields
from typing import Any

from ..errors import GGUFFormatError
from ..limits import MAX_VOCAB
from .family import Family

# Limits well above every published model (the largest: 126 layers, width 16384, 128 heads, head size 256,
# 384 experts), so that no product of them can ask for absurd memory. The vocabulary's is the tokenizer's
# too, so it lives with the other budgets on what a file controls (oxigpu/limits.py).
MAX_LAYERS = 1024
MAX_WIDTH = 1 << 17          # n_embd, feed-forward widths
MAX_HEADS = 1024
MAX_HEAD_DIM = 1024
MAX_CTX = 1 << 24
MAX_EXPERTS = 1024
MAX_ROPE_BASE = 1e12
MIN_EPS = 1e-30              # a normal float32 on every GPU (no flush to zero)
MIN_SCALE, MAX_SCALE = 1e-6, 1e6   # multipliers and soft-caps: products stay finite in float32


@dataclass(frozen=True)
class HParams:
    """What a builder needs to lay out one model's graph (per-layer facts via methods)."""

    arch: str
    family: Family
    n_layer: int
    n_embd: int
    n_head: int
    n_head_kv: int
    head_dim: int            # key/query head size (`attention.key_length`, default n_embd / n_head)
    head_dim_v: int          # value head size (`attention.value_length`, default head_dim)
    n_ff: int
    n_vocab: int
    n_ctx_train: int
    norm_eps: float
    rope_base: float         # the file's freq_base (global layers)
    rope_dims: int           # rotated dims per head (partial rotary when < head_dim)
    rope_scaling_type: str | None
    rope_scaling_factor: float | None
    rope_scaling_orig_ctx: int | None
    rope_freq_factors: bool  # a `rope_freqs.weight` tensor (llama 3.1+ long-context scaling) is present
    sliding_window: int | None             # None: every layer global
    swa_layers: tuple[bool, ...]           # per layer: attends through the sliding window
    rope_base_swa: float | None            # RoPE base of sliding layers (None: rope_base)
    attn_logit_softcap: float | None
    final_logit_softcap: float | None
    tied_embeddings: bool    # no `output.weight`: the LM head reuses `token_embd.weight`
    attn_scale: float        # q.k scale
    embed_scale: float       # token embeddings are multiplied by this
    residual_scale: float    # attention and FFN outputs are multiplied by this before the residual adds
    logit_scale: float       # logits are divided by this
    n_expert: int            # 0: dense FFN
    n_expert_used: int
    n_ff_exp: int            # feed-forward width of one expert
    expert_weights_scale: float
    n_token_types: int       # rows of token_types.weight (encoders; 0: none)
    pooling: str             # "none" | "mean" | "cls" | "last" | "rank": a text's embedding (pooling_type)

    # -- family facts, for builders and `oxigpu info` ------------------------------------------------
    @property
    def rope_neox(self) -> bool:
        return self.family.rope_neox

    @property
    def qkv_bias(self) -> bool:
        return self.family.qkv_bias

    @property
    def qk_norm(self) -> str | None:
        return self.family.qk_norm

    @property
    def post_norms(self) -> bool:
        return self.family.post_norms

    @property
    def activation(self) -> str:
        return self.family.act

    @property
    def n_gqa(self) -> int:
        """Query heads per KV head."""
        return self.n_head // self.n_head_kv

    def is_sliding(self, layer: int) -> bool:
        """Whether `layer` attends through the sliding window (False for global layers)."""
        return self.sliding_window is not None and self.swa_layers[layer]

    def layer_rope_base(self, layer: int) -> float:
        """RoPE base of `layer`: sliding layers may use their own."""
        if self.rope_base_swa is not None and self.is_sliding(layer):
            return self.rope_base_swa
        return self.rope_base

    def explain(self, fields: Iterable[str]) -> str:
        """The GGUF keys (with their values) of HParams ``fields``, for tensor-shape mismatch messages."""
        def key(f: str) -> str:
            if f == "n_ff_exp" and self.n_ff_exp == self.n_ff:   # the expert width defaults to the FFN's
                return f"{self.arch}.expert_feed_forward_length (or {self.arch}.feed_forward_length)"
            return _KEYS[f] if _KEYS[f].startswith("tokenizer.") else f"{self.arch}.{_KEYS[f]}"
        return ", ".join(f"{key(f)} = {getattr(self, f)}" for f in fields)

    def to_dict(self) -> dict[str, Any]:
        d = {f.name: getattr(self, f.name) for f in fields(self) if f.name not in ("family", "swa_layers")}
        d["sliding_layers"] = [i for i, s in enumerate(self.swa_layers) if s] if self.sliding_window else []
        d.update(rope_neox=self.rope_neox, qkv_bias=self.qkv_bias, qk_norm=self.qk_norm,
                 pre_norms=self.family.pre_norms, post_norms=self.post_norms, activation=self.activation)
        return d

    @classmethod
    def from_metadata(cls, arch: str, metadata: Mapping[str, Any],
                      tensor_names: Iterable[str] | None = None, path: str | None = None) -> HParams:
        """Read and validate `arch`'s hyperparameters from a GGUF metadata mapping.

        `tensor_names` decides what only the tensor list can tell (tied LM head, RoPE frequency factors);
        without it the LM head counts as untied and there are no frequency factors.
        """
        from .registry import get_family
        fam = get_family(arch)
        names = set(tensor_names) if tensor_names is not None else set()
        r = _Reader(arch, metadata, path)

        n_layer = r.int("block_count", hi=MAX_LAYERS)
        n_embd = r.int("embedding_length", hi=MAX_WIDTH)
        n_head = r.int("attention.head_count", hi=MAX_HEADS)
        n_head_kv = r.int("attention.head_count_kv", n_head, hi=MAX_HEADS)
        if n_head % n_head_kv:
            r.fail("attention.head_count_kv", n_head_kv, f"must divide attention.head_count ({n_head})")
        if not r.has("attention.key_length") and n_embd % n_head:
            r.fail("attention.head_count", n_head, f"must divide embedding_length ({n_embd}) when "
                   "attention.key_length is absent")
        head_dim = r.int("attention.key_length", n_embd // n_head, hi=MAX_HEAD_DIM)
        head_dim_v = r.int("attention.value_length", head_dim, hi=MAX_HEAD_DIM)
        for k, v in (("attention.key_length", head_dim), ("attention.value_length", head_dim_v)):
            if v % 2:   # RoPE rotates pairs; the f16 cache packs two halves per word
                r.fail(k, v, "must be even")
        n_ff = r.int("feed_forward_length", hi=MAX_WIDTH)
        n_vocab = r.int("vocab_size", None, hi=MAX_VOCAB, needed_by="oxigpu.limits.MAX_VOCAB")
        if n_vocab is None:
            tokens = metadata.get("tokenizer.ggml.tokens")
            if not isinstance(tokens, list):   # absent, or an array of numbers, a string, a number
                r.fail("vocab_size", None, "neither vocab_size nor a tokenizer.ggml.tokens list of strings is "
                       "present")
            n_vocab = len(tokens)
            if not 1 <= n_vocab <= MAX_VOCAB:
                raise GGUFFormatError(f"{n_vocab} tokens; expected 1..{MAX_VOCAB} (oxigpu.limits.MAX_VOCAB)",
                                      path=path, field="tokenizer.ggml.tokens")
        n_ctx_train = r.int("context_length", hi=MAX_CTX)

        eps_key = "attention.layer_norm_rms_epsilon" if fam.norm == "rms" else "attention.layer_norm_epsilon"
        norm_eps = r.float(eps_key, fam.norm_eps, MIN_EPS, 1.0)
        rope_base = r.float("rope.freq_base", fam.rope_base, 1.0, MAX_ROPE_BASE)
        rope_dims = r.int("rope.dimension_count", head_dim, hi=MAX_HEAD_DIM)
        if rope_dims % 2 or rope_dims > head_dim:
            r.fail("rope.dimension_count", rope_dims, f"must be even and at most the head size {head_dim}")
        scaling = r.text("rope.scaling.type", None)
        scaling = None if scaling in (None, "none") else scaling
        if scaling not in (None, "linear"):
            r.fail("rope.scaling.type", scaling, "is not supported (only linear)")
        factor = r.float("rope.scaling.factor", None, MIN_SCALE, MAX_SCALE)
        if scaling == "linear" and factor is None:
            r.fail("rope.scaling.factor", None, "is required with linear RoPE scaling")
        orig_ctx = r.int("rope.scaling.original_context_length", None, hi=MAX_CTX)

        window, swa_layers, rope_base_swa = None, (False,) * n_layer, None
        if fam.swa is not None:
            w = r.int("attention.sliding_window", fam.swa.window, lo=0, hi=MAX_CTX)
            if w:   # llama.cpp: a window of 0 means every layer is global
                window = w
                swa_layers = _swa_layers(r, fam.swa.pattern, n_layer)
                rope_base_swa = r.float("rope.freq_base_swa", fam.swa.rope_base, 1.0, MAX_ROPE_BASE)

        # 0 in the file means no cap (llama.cpp would divide by it)
        attn_cap, final_cap = (None if d is None else r.scale(k) if r.has(k) else (d or None)
                               for k, d in zip(("attn_logit_softcapping", "final_logit_softcapping"), fam.softcaps))

        n_expert = r.int("expert_count", 0, lo=0, hi=MAX_EXPERTS)
        n_expert_used = n_ff_exp = 0
        w_scale = 1.0
        if fam.moe is not None and fam.moe.required and n_expert == 0:
            r.fail("expert_count", n_expert, "must be positive: this architecture is mixture-of-experts")
        if n_expert and fam.moe is None:
            r.fail("expert_count", n_expert, f"{arch} has no mixture-of-experts layers")
        if n_expert:
            n_expert_used = r.int("expert_used_count", hi=n_expert,
                                  needed_by=f"{r.key('expert_count')} is {n_expert}")
            n_ff_exp = r.int("expert_feed_forward_length", n_ff, hi=MAX_WIDTH)
            w_scale = r.scale("expert_weights_scale") or 1.0
        elif fam.moe is not None and r.has("expert_used_count"):
            r.int("expert_used_count", lo=0, hi=0, needed_by=f"{r.key('expert_count')} is 0")

        hp = cls(
            arch=arch, family=fam, n_layer=n_layer, n_embd=n_embd, n_head=n_head, n_head_kv=n_head_kv,
            head_dim=head_dim, head_dim_v=head_dim_v, n_ff=n_ff, n_vocab=n_vocab, n_ctx_train=n_ctx_train,
            norm_eps=norm_eps, rope_base=rope_base, rope_dims=rope_dims, rope_scaling_type=scaling,
            rope_scaling_factor=factor, rope_scaling_orig_ctx=orig_ctx,
            rope_freq_factors="rope_freqs.weight" in names,
            sliding_window=window, swa_layers=swa_layers, rope_base_swa=rope_base_swa,
            attn_logit_softcap=attn_cap, final_logit_softcap=final_cap,
            tied_embeddings=tensor_names is not None and "output.weight" not in names,
            attn_scale=1.0 / math.sqrt(head_dim),
            embed_scale=math.sqrt(n_embd) if fam.embed_scale else 1.0,
            # granite's multipliers; llama.cpp reads 0 as "not set"
            residual_scale=r.scale("residual_scale") or 1.0,
            logit_scale=r.scale("logit_scale") or 1.0,
            n_expert=n_expert, n_expert_used=n_expert_used, n_ff_exp=n_ff_exp, expert_weights_scale=w_scale,
            n_token_types=_token_types(metadata, path),
            pooling=POOLING[r.int("pooling_type", POOLING.index(fam.pooling), lo=0, hi=len(POOLING) - 1)],
        )
        scale = r.scale("attention.scale") or (fam.attn_scale(hp) if fam.attn_scale is not None else hp.attn_scale)
        emb = r.scale("embedding_scale") or hp.embed_scale
        return _replace(hp, attn_scale=scale, embed_scale=emb)

    @classmethod
    def from_gguf(cls, gguf_file: Any) -> HParams:
        """From an opened `oxigpu.gguf.GGUFFile` (metadata plus its tensor list)."""
        meta = gguf_file.metadata
        arch = meta.get("general.architecture")
        if arch is None:
            raise GGUFFormatError("missing", path=str(gguf_file.path), field="general.architecture")
        if not isinstance(arch, str):
            raise GGUFFormatError(f"expected a string, got {arch!r}", path=str(gguf_file.path),
                                  field="general.architecture")
        return cls.from_metadata(arch, meta, gguf_file.tensors.keys(), str(gguf_file.path))


POOLING = ("none", "mean", "cls", "last", "rank")
"""llama.cpp's pooling types, by their `pooling_type` number."""


def _token_types(md: Mapping[str, Any], path: str | None) -> int:
    v = md.get("tokenizer.ggml.token_type_count", 0)
    if isinstance(v, bool) or not isinstance(v, int) or not 0 <= v <= 1024:
        raise GGUFFormatError(f"value {v!r} is out of range; expected an integer in 0..1024", path=path,
                              field="tokenizer.ggml.token_type_count")
    return v


_KEYS = {"n_embd": "embedding_length", "n_vocab": "vocab_size", "n_ff": "feed_forward_length",
         "n_head": "attention.head_count", "n_head_kv": "attention.head_count_kv",
         "head_dim": "attention.key_length", "head_dim_v": "attention.value_length",
         "rope_dims": "rope.dimension_count", "n_expert": "expert_count",
         "n_ff_exp": "expert_feed_forward_length", "n_layer": "block_count", "n_ctx_train": "context_length",
         "n_token_types": "tokenizer.ggml.token_type_count"}
"""HParams fields that size tensors -> their GGUF keys (without the architecture prefix)."""


def _replace(hp: HParams, **kw: Any) -> HParams:
    from dataclasses import replace
    return replace(hp, **kw)


def _swa_layers(r: _Reader, default_pattern: int, n_layer: int) -> tuple[bool, ...]:
    """Per-layer sliding flags: the file's pattern (a count or one flag per layer), else the family's."""
    key = "attention.sliding_window_pattern"
    raw = r.raw(key)
    if raw is not None and not isinstance(raw, (str, bytes)) and hasattr(raw, "__len__"):
        flags = list(raw)
        if len(flags) != n_layer or any(not _is_int(f) or int(f) not in (0, 1) for f in flags):
            r.fail(key, _short(raw), f"must be {n_layer} flags of 0 or 1 (one per layer)")
        return tuple(bool(f) for f in flags)
    pattern = r.int(key, default_pattern, lo=0, hi=MAX_LAYERS)
    return tuple(pattern == 0 or il % pattern < pattern - 1 for il in range(n_layer))


class _Reader:
    """Typed, range-checked access to ``{arch}.{key}`` values; failures name the key and the value."""

    def __init__(self, arch: str, metadata: Mapping[str, Any], path: str | None = None):
        self.arch, self.metadata, self.path = arch, metadata, path

    def key(self, k: str) -> str:
        return f"{self.arch}.{k}"

    def has(self, k: str) -> bool:
        return self.key(k) in self.metadata

    def raw(self, k: str) -> Any:
        return self.metadata.get(self.key(k))

    def fail(self, k: str, value: Any, why: str) -> None:
        shown = value if isinstance(value, _Shown) else repr(value)
        raise GGUFFormatError(f"value {shown} {why}" if value is not None else why, path=self.path,
                              field=self.key(k))

    def _scalar(self, k: str) -> Any:
        """The value as one scalar; per-layer arrays are accepted only when uniform."""
        v = self.raw(k)
        if isinstance(v, (str, bytes, bytearray)):
            return v
        if hasattr(v, "__len__"):
            values = list(v)
            if not values or any(_neq(x, values[0]) for x in values):
                self.fail(k, _short(v), "differs per layer; only uniform layers are supported")
            v = values[0]
        return v.item() if hasattr(v, "item") else v

    def int(self, k: str, default: Any = ..., lo: int = 1, hi: int = MAX_CTX, needed_by: str = "") -> Any:
        if not self.has(k):
            if default is ...:
                self.fail(k, None, "required hyperparameter is missing" + (f" ({needed_by})" if needed_by else ""))
            return default
        v = self._scalar(k)
        if not _is_int(v):
            self.fail(k, v, "must be an integer")
        if not lo <= v <= hi:
            self.fail(k, v, f"is out of range; expected {lo}..{hi}" + (f" ({needed_by})" if needed_by else ""))
        return int(v)

    def float(self, k: str, default: Any, lo: float, hi: float) -> Any:
        """A finite number in [lo, hi]."""
        if not self.has(k):
            return default
        v = self._scalar(k)
        if isinstance(v, bool) or not isinstance(v, (int, float)):
            self.fail(k, v, "must be a number")
        v = float(v)
        if not (math.isfinite(v) and lo <= v <= hi):
            self.fail(k, v, f"is out of range; expected a finite number in [{lo:g}, {hi:g}]")
        return v

    def scale(self, k: str) -> float | None:
        """A multiplier or cap: None when absent or 0 (llama.cpp's "not set"), else in [MIN_SCALE, MAX_SCALE]."""
        if not self.has(k):
            return None
        v = self._scalar(k)
        if isinstance(v, (int, float)) and not isinstance(v, bool) and v == 0:
            return None
        return self.float(k, None, MIN_SCALE, MAX_SCALE)

    def text(self, k: str, default: Any) -> Any:
        if not self.has(k):
            return default
        v = self._scalar(k)
        if not isinstance(v, str):
            self.fail(k, v, "must be a string")
        return v


def _is_int(v: Any) -> bool:
    return isinstance(v, int) and not isinstance(v, bool)


def _neq(a: Any, b: Any) -> bool:
    try:
        return bool(a != b)
    except (TypeError, ValueError):
        return True


class _Shown(str):
    """A value already rendered for a message (arrays, shortened)."""


def _short(v: Any) -> _Shown:
    if hasattr(v, "tolist"):
        v = v.tolist()
    s = repr(list(v) if hasattr(v, "__len__") and not isinstance(v, str) else v)
    return _Shown(s if len(s) <= 60 else s[:57] + "...")
