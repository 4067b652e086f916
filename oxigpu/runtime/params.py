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

FinishReason = Literal["stop", "length", "tool_calls"]
_F32_MAX = 3.4028234663852886e38
_F32_MIN_NORMAL = 1.1754943508222875e-38


@dataclass(frozen=True)
class SamplingParams:
    """How to pick tokens and when to stop. Every sampler of llama.cpp, with its semantics, ranges and
    default order (``runtime/sampling.py`` gives the chain; each stage below is off at its "off" value).

    Truncation and temperature:
      temperature >= 0 (0: greedy); dynatemp_range >= 0 (0: off) and dynatemp_exponent >= 0: the
      temperature is taken in [temperature - range, temperature + range] by the normalized entropy of the
      candidates raised to the exponent; top_k >= 0 (0: off; at most 256 candidates are ever kept);
      top_p in (0, 1] (1: off); min_p in [0, 1] (0: off); typical_p in (0, 1] (1: off); top_n_sigma
      (<= 0: off): keep logits within n standard deviations of the best; xtc_probability in [0, 1] (0:
      off) and xtc_threshold in [0, 1] (above 0.5: off): with that probability, drop every candidate at
      least that likely but the least likely of them.
    Repetition:
      repeat_penalty > 0 (1: off), presence_penalty and frequency_penalty (0: off), over the last
      repeat_last_n tokens (0: off, -1: the whole context), prompt included; DRY: dry_multiplier >= 0 (0:
      off), dry_base >= 1, dry_allowed_length >= 0, dry_penalty_last_n >= -1 (-1: the whole context,
      0: off), dry_sequence_breakers (strings repetitions do not reach across).
    Mirostat: mirostat 0 (off), 1 or 2; mirostat_tau >= 0 (target surprise), mirostat_eta >= 0 (learning
      rate). As in llama.cpp it replaces the repetition and truncation stages (logit bias and temperature
      still apply).
    Other: ``seed`` None draws a fresh seed per call; the same seed with the same prompt and settings gives
    the same tokens on the same backend (the RNG is counter-based: token i uses (seed, i), nothing else);
    across backends the logits differ by float rounding, so the distribution is the same but a draw within
    rounding of a threshold (a near-tie, for greedy) can differ (README.md, Reliability, determinism).
    ``stop`` strings end generation and are never part of the text. ``logit_bias`` adds a value to a
    token's logit before sampling (-inf bans it). ``logprobs`` reports the chosen token's log-probability,
    ``top_logprobs`` in [0, 20] the most likely alternatives too (needs logprobs).
    Structured output (at most one): ``json=True`` (any JSON object), ``json_schema`` (a JSON Schema, dict
    or JSON text), ``grammar`` (GBNF or Lark), ``regex``; the output then always matches it.

    Mirostat and DRY keep per-sequence state on the host, and a constraint needs the host between tokens:
    those generations run step by step, not in the GPU-resident decode loop.
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
    typical_p: float = 1.0
    top_n_sigma: float = -1.0
    dynatemp_range: float = 0.0
    dynatemp_exponent: float = 1.0
    xtc_probability: float = 0.0
    xtc_threshold: float = 0.1
    dry_multiplier: float = 0.0
    dry_base: float = 1.75
    dry_allowed_length: int = 2
    dry_penalty_last_n: int = -1
    dry_sequence_breakers: tuple[str, ...] = ("\n", ":", "\"", "*")
    mirostat: int = 0
    mirostat_tau: float = 5.0
    mirostat_eta: float = 0.1
    logprobs: bool = False
    top_logprobs: int = 0
    json: bool = False
    json_schema: Mapping[str, Any] | str | None = None
    grammar: str | None = None
    regex: str | None = None

    def __post_init__(self) -> None:
        for name in ("stop", "dry_sequence_breakers"):
            value = getattr(self, name)
            if isinstance(value, str):
                object.__setattr__(self, name, (value,))
            elif not isinstance(value, tuple):
                object.__setattr__(self, name, tuple(value))
        object.__setattr__(self, "logit_bias", dict(self.logit_bias))
        self._validate()

    @property
    def constrained(self) -> bool:
        """Whether a constraint (json, json_schema, grammar, regex) is set."""
        return bool(self.json) or any(getattr(self, n) is not None for n in ("json_schema", "grammar", "regex"))

    def _validate(self) -> None:
        for name in ("max_tokens", "top_k", "repeat_last_n", "dry_allowed_length", "dry_penalty_last_n",
                     "mirostat", "top_logprobs"):
            value = getattr(self, name)
            if isinstance(value, bool) or not isinstance(value, int):
                raise InvalidParameterError(f"{name} must be an integer, got {value!r}")
            low = -1 if name in ("repeat_last_n", "dry_penalty_last_n") else 0
            if value < low:
                raise InvalidParameterError(f"{name} must be >= {low}, got {value}")
        for name in ("temperature", "top_p", "min_p", "repeat_penalty", "presence_penalty", "frequency_penalty",
                     "typical_p", "top_n_sigma", "dynatemp_range", "dynatemp_exponent", "xtc_probability",
                     "xtc_threshold", "dry_multiplier", "dry_base", "mirostat_tau", "mirostat_eta"):
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
        for name, lo, hi, note in (("top_p", 0, 1, "1 disables it"), ("typical_p", 0, 1, "1 disables it")):
            if not lo < getattr(self, name) <= hi:
                raise InvalidParameterError(f"{name} must be in ({lo}, {hi}] ({note}), got {getattr(self, name)}")
        for name, note in (("min_p", "0 disables it"), ("xtc_probability", "0 disables it"),
                           ("xtc_threshold", "above 0.5 disables XTC")):
            if not 0 <= getattr(self, name) <= 1:
                raise InvalidParameterError(f"{name} must be in [0, 1] ({note}), got {getattr(self, name)}")
        if self.repeat_penalty <= 0:
            raise InvalidParameterError(
                f"repeat_penalty must be > 0 (1 disables it), got {self.repeat_penalty}")
        if self.repeat_penalty < _F32_MIN_NORMAL:
            raise InvalidParameterError(f"repeat_penalty must be at least {_F32_MIN_NORMAL:.4g} (float32), got "
                                        f"{self.repeat_penalty!r}")
        for name, note in (("dynatemp_range", "0 disables dynamic temperature"), ("dynatemp_exponent", ""),
                           ("dry_multiplier", "0 disables DRY"), ("mirostat_tau", ""), ("mirostat_eta", "")):
            if getattr(self, name) < 0:
                raise InvalidParameterError(f"{name} must be >= 0{f' ({note})' if note else ''}, "
                                            f"got {getattr(self, name)}")
        if self.dry_base < 1:
            raise InvalidParameterError(f"dry_base must be >= 1, got {self.dry_base}")
        if self.mirostat not in (0, 1, 2):
            raise InvalidParameterError(f"mirostat must be 0 (off), 1 or 2, got {self.mirostat}")
        if not isinstance(self.logprobs, bool):
            raise InvalidParameterError(f"logprobs must be True or False, got {self.logprobs!r}")
        if self.top_logprobs > 20:
            raise InvalidParameterError(f"top_logprobs must be in [0, 20], got {self.top_logprobs}")
        if self.top_logprobs and not self.logprobs:
            raise InvalidParameterError("top_logprobs needs logprobs=True")
        for s in self.dry_sequence_breakers:
            if not isinstance(s, str) or not s:
                raise InvalidParameterError(f"dry_sequence_breakers must be non-empty strings, got {s!r}")
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
        if not isinstance(self.json, bool):
            raise InvalidParameterError(f"json must be True or False, got {self.json!r}")
        if self.json_schema is not None and not isinstance(self.json_schema, (Mapping, str)):
            raise InvalidParameterError("json_schema must be a dict or JSON text, got "
                                        f"{type(self.json_schema).__name__}")
        for name in ("grammar", "regex"):
            value = getattr(self, name)
            if value is not None and (not isinstance(value, str) or not value.strip()):
                raise InvalidParameterError(f"{name} must be a non-empty string, got {value!r}")
        given = [n for n in ("json", "json_schema", "grammar", "regex")
                 if (getattr(self, n) if n == "json" else getattr(self, n) is not None)]
        if len(given) > 1:
            raise InvalidParameterError(f"give at most one constraint; got {' and '.join(given)}")

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
    cached_tokens: int        # prompt tokens whose K/V came from the prefix cache (earlier calls' blocks)
    prompt_s: float           # first scheduled -> first token drawn
    generated_tokens: int
    generation_s: float       # first token drawn -> finished
    queue_s: float = 0.0      # submitted -> first scheduled (waiting for a sequence slot or KV blocks)
    preemptions: int = 0      # times its KV blocks were taken for older sequences (then recomputed)

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
class TokenLogprob:
    """A token with its log-probability (natural log, over the whole vocabulary after the constraint, the
    logit bias and the penalties, at temperature 1) and, for a chosen token, the most likely alternatives
    (``top_logprobs`` of them, best first)."""

    token_id: int
    token: str                # the token's text (its bytes decoded; a partial UTF-8 character as U+FFFD)
    bytes: bytes              # the token's bytes
    logprob: float
    top_logprobs: tuple[TokenLogprob, ...] = ()


@dataclass(frozen=True)
class ToolCall:
    """A function call the model asked for: ``arguments`` is the JSON text of the arguments (an object)."""

    id: str
    name: str
    arguments: str


@dataclass(frozen=True)
class GenerationResult:
    """The outcome of one generate/chat call.

    `token_ids` are the sampled tokens, without the end-of-generation token that stopped the run; when a
    stop string ended it, they include the token that completed the match while `text` is cut before it.
    `logprobs` (one per token of `token_ids`) when asked. `tool_calls`: the calls a chat with tools
    produced (finish_reason "tool_calls"; `text` is then what the model said besides them).
    """

    text: str
    token_ids: Sequence[int]
    finish_reason: FinishReason
    timings: Timings
    logprobs: Sequence[TokenLogprob] | None = None
    tool_calls: Sequence[ToolCall] = ()
