"""What a caller asks for (SamplingParams) and what a generation gives back (GenerationResult, Timings).

These are plain dataclasses shared by the engine, the Python API and the CLI, so a setting is validated
once, in one place, with one message, whichever door it came in through.
"""
from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field, fields, replace
from typing import Any, Literal

from ..errors import InvalidParameterError
from .stops import check_stops

FinishReason = Literal["stop", "length"]
_F32_MAX = 3.4028234663852886e38
_F32_MIN_NORMAL = 1.1754943508222875e-38


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop.

    temperature 0 means greedy. top_k 0, top_p 1, min_p 0 and repeat_penalty 1 each disable that filter.
    `seed` None draws a fresh seed per call; the same seed with the same prompt and settings gives the same
    tokens on the same backend (the sampler's RNG is counter-based: token i uses (seed, i), nothing else).
    Across backends the logits differ by float rounding, so the distribution is the same but a draw within
    rounding of a threshold (a near-tie, for greedy) can differ: README.md, Reliability, determinism.
    `stop` strings end generation and are never part of the returned text.
    `logit_bias` adds a value to a token's logit before sampling (-inf or a large negative bans it).
    """

    max_tokens: int = 256
    temperature: float = 0.8
    top_k: int = 40
    top_p: float = 0.95
    min_p: float = 0.05
    repeat_penalty: float = 1.0
    repeat_last_n: int = 64
    presence_penalty: float = 0.0
    frequency_penalty: float = 0.0
    stop: tuple[str, ...] = ()
    seed: int | None = None
    logit_bias: Mapping[int, float] = field(default_factory=dict)

    def __post_init__(self) -> None:
        if isinstance(self.stop, str):
            object.__setattr__(self, "stop", (self.stop,))
        elif not isinstance(self.stop, tuple):
            object.__setattr__(self, "stop", tuple(self.stop))
        object.__setattr__(self, "logit_bias", dict(self.logit_bias))
        self._validate()

    def _validate(self) -> None:
        for name in ("max_tokens", "top_k", "repeat_last_n"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidParameterError(f"{name} must be an integer, got {value!r}")
            if value < 0:
                raise InvalidParameterError(f"{name} must be >= 0, got {value}")
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty",
                     "frequency_penalty"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, (int, float)) or value != value:
                raise InvalidParameterError(f"{name} must be a number, got {value!r}")
            if value in (math.inf, -math.inf):
                raise InvalidParameterError(f"{name} must be finite, got {value!r}")
            if abs(value) > _F32_MAX:   # the GPU sampler reads float32
                raise InvalidParameterError(f"{name} must be finite as a float32 (|x| <= 3.4e38), got {value!r}")
        if self.temperature < 0:
            raise InvalidParameterError(f"temperature must be >= 0 (0 is greedy), got {self.temperature}")
        if 0 < self.temperature < _F32_MIN_NORMAL:   # a float32 would round it to 0 (greedy) or a subnormal
            raise InvalidParameterError(f"temperature must be 0 (greedy) or at least {_F32_MIN_NORMAL:.4g} "
                                        f"(float32), got {self.temperature!r}")
        if not 0 < self.top_p <= 1:
            raise InvalidParameterError(f"top_p must be in (0, 1], got {self.top_p}")
        if not 0 <= self.min_p <= 1:
            raise InvalidParameterError(f"min_p must be in [0, 1], got {self.min_p}")
        if self.repeat_penalty <= 0:
            raise InvalidParameterError(
                f"repeat_penalty must be > 0 (1 disables it), got {self.repeat_penalty}")
        if self.repeat_penalty < _F32_MIN_NORMAL:
            raise InvalidParameterError(f"repeat_penalty must be at least {_F32_MIN_NORMAL:.4g} (float32), got "
                                        f"{self.repeat_penalty!r}")
        if self.seed is not None and (isinstance(self.seed, bool) or not isinstance(self.seed, int)
                                      or not 0 <= self.seed < 2**64):
            raise InvalidParameterError(f"seed must be an integer in [0, 2**64), got {self.seed!r}")
        check_stops(self.stop)   # non-empty strings, within the count and length limits
        for tok, bias in self.logit_bias.items():
            if isinstance(tok, bool) or not isinstance(tok, int) or tok < 0:
                raise InvalidParameterError(f"logit_bias keys must be token ids >= 0, got {tok!r}")
            if not isinstance(bias, (int, float)) or bias != bias:
                raise InvalidParameterError(f"logit_bias[{tok}] must be a number, got {bias!r}")
            if bias != -math.inf and not abs(bias) <= _F32_MAX:
                raise InvalidParameterError(
                    f"logit_bias[{tok}] must be finite (float32) or -inf to ban the token, got {bias!r}; a bias "
                    f"of 100 already forces a token")

    def with_overrides(self, **overrides: Any) -> SamplingParams:
        """A copy with every override that is not None applied (and validated)."""
        known = {f.name for f in fields(self)}
        unknown = set(overrides) - known
        if unknown:
            raise InvalidParameterError(f"unknown sampling parameter(s): {', '.join(sorted(unknown))}")
        given = {k: v for k, v in overrides.items() if v is not None}
        return replace(self, **given) if given else self


@dataclass(frozen=True)
class Timings:
    """Where the time went; rates are 0 when there was nothing to measure."""

    load_s: float
    prompt_tokens: int
    cached_tokens: int        # prompt tokens whose K/V were reused from the previous call
    prompt_s: float
    generated_tokens: int
    generation_s: float

    @property
    def prompt_tokens_per_s(self) -> float:
        evaluated = self.prompt_tokens - self.cached_tokens
        return evaluated / self.prompt_s if self.prompt_s > 0 and evaluated > 0 else 0.0

    @property
    def tokens_per_s(self) -> float:
        return self.generated_tokens / self.generation_s if self.generation_s > 0 else 0.0

    def summary(self) -> str:
        """One line for humans (the CLI prints it on stderr)."""
        cached = f", {self.cached_tokens} cached" if self.cached_tokens else ""
        return (f"prompt: {self.prompt_tokens} tokens{cached}, {self.prompt_tokens_per_s:.1f} tok/s | "
                f"generated: {self.generated_tokens} tokens, {self.tokens_per_s:.1f} tok/s | "
                f"load: {self.load_s:.2f} s")


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of one generate/chat call.

    `token_ids` are the sampled tokens, without the end-of-generation token that stopped the run; when a
    stop string ended it, they include the token that completed the match while `text` is cut before it.
    """

    text: str
    token_ids: Sequence[int]
    finish_reason: FinishReason
    timings: Timings
