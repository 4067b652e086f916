"""One sequence's token choice, host side: its sampler settings, RNG counter, mirostat state, DRY penalties,
constraint and logprobs. The engine asks it for the next token given the logits (the numpy twin draws), or
for the packed slot the GPU sampler draws with, and tells it about tokens drawn on the device.
"""
from __future__ import annotations

import functools
import secrets
import weakref
from collections.abc import Sequence
from typing import TYPE_CHECKING

import numpy as np

from . import sampling
from .constraints import Constraint, ConstraintState
from .params import SamplingParams, TokenLogprob

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer

_BREAKERS: weakref.WeakKeyDictionary = weakref.WeakKeyDictionary()


def sampler_config(params: SamplingParams, n_ctx: int, seed: int | None = None) -> sampling.SamplerConfig:
    """The sampler's settings for ``params`` (``seed``: the 64-bit seed to use, default params.seed)."""
    seed = params.seed if seed is None else seed
    return sampling.SamplerConfig(
        temperature=params.temperature, dynatemp_range=params.dynatemp_range,
        dynatemp_exponent=params.dynatemp_exponent, top_k=params.top_k, top_p=params.top_p, min_p=params.min_p,
        typical_p=params.typical_p, top_n_sigma=params.top_n_sigma, xtc_probability=params.xtc_probability,
        xtc_threshold=params.xtc_threshold, repeat_penalty=params.repeat_penalty,
        presence_penalty=params.presence_penalty, frequency_penalty=params.frequency_penalty,
        penalty_last_n=n_ctx if params.repeat_last_n == -1 else params.repeat_last_n,
        mirostat=params.mirostat, mirostat_tau=params.mirostat_tau, mirostat_eta=params.mirostat_eta,
        seed=sampling.fold_seed(seed or 0), logit_bias=params.logit_bias,
        n_logprobs=params.top_logprobs if params.logprobs else -1)


def dry_breakers(tokenizer: Tokenizer, breakers: tuple[str, ...]) -> dict[int, tuple[tuple[int, ...], ...]]:
    """DRY's sequence breakers as token sequences for ``tokenizer`` (cached: a pass over the vocabulary)."""
    per = _BREAKERS.setdefault(tokenizer, {})
    if breakers not in per:
        pieces = [tokenizer.token_to_piece(i, special=True) for i in range(tokenizer.vocab_size)]
        per[breakers] = sampling.dry_breakers(
            pieces, functools.partial(tokenizer.encode, add_special=False, parse_special=False), breakers)
    return per[breakers]


class SequenceSampler:
    """Everything that picks one sequence's tokens, host side (see the module docstring).

    ``constraint``: the compiled constraint of the request (its state starts here). Token ``i`` of the
    generation draws with RNG counter ``i``, whichever backend draws it."""

    def __init__(self, params: SamplingParams, tokenizer: Tokenizer, n_ctx: int,
                 constraint: Constraint | None = None):
        seed = params.seed if params.seed is not None else secrets.randbits(64)
        self.params = params
        self.cfg = sampler_config(params, n_ctx, seed)
        self.n_ctx = n_ctx
        self._tokenizer = tokenizer
        self.dry = sampling.DryConfig(params.dry_multiplier, params.dry_base, params.dry_allowed_length,
                                      params.dry_penalty_last_n)
        if self.dry.enabled and not params.mirostat:
            self.dry = sampling.DryConfig(params.dry_multiplier, params.dry_base, params.dry_allowed_length,
                                          params.dry_penalty_last_n,
                                          dry_breakers(tokenizer, params.dry_sequence_breakers))
        else:
            self.dry = sampling.DryConfig()
        self.counter = 0
        self.mu = 2.0 * params.mirostat_tau
        self.constraint: ConstraintState | None = constraint.start() if constraint is not None else None
        self.logprobs: list[TokenLogprob] | None = [] if params.logprobs else None

    @property
    def resident(self) -> bool:
        """Whether the GPU-resident decode loop can draw this sequence's tokens: not with host state
        between tokens (mirostat's mu, DRY's matching, a constraint's mask)."""
        return not (self.cfg.mirostat or self.dry.enabled or self.constraint is not None)

    def adjust(self, context: Sequence[int]) -> dict[int, float] | None:
        """DRY's penalties for the next draw after ``context`` (None when DRY is off)."""
        return sampling.dry_penalties(context, self.dry, self.n_ctx) if self.dry.enabled else None

    def mask(self) -> np.ndarray | None:
        """The constraint's bitmask for the next draw (None when unconstrained)."""
        return self.constraint.mask() if self.constraint is not None else None

    def draw(self, logits: np.ndarray, context: Sequence[int]) -> int:
        """The next token after ``context`` from its ``logits`` (numpy twin), accepted."""
        d = sampling.draw(logits, self.cfg, context, self.counter, self.mask(), self.mu, self.adjust(context))
        self.accept(d.token, d.mu, d.logprob, d.top)
        return d.token

    def forced_tokens(self) -> list[int]:
        """The tokens the constraint forces next (JSON keys and punctuation, a grammar's literals), taken
        now: no draw, so none of them costs a forward pass of its own (the engine evaluates them in one
        chunk). None when logprobs are asked (each token then needs its own distribution)."""
        if self.constraint is None or self.logprobs is not None:
            return []
        ff = self.constraint.forced()
        self.counter += len(ff)
        return ff

    def slot_batch(self, context: Sequence[int]) -> sampling.SlotBatch:
        """This sequence as a one-slot batch for the GPU sampler, about to draw after ``context``."""
        return sampling.pack_batch([self.cfg], [len(context)], [self.counter], [self.mu], [self.adjust(context)],
                                   [self.mask()])

    def accept(self, token: int, mu: float | None = None, logprob: float | None = None,
               top: Sequence[tuple[int, float]] = ()) -> None:
        """``token`` was drawn (by either backend): advance the counter, mirostat and the constraint; keep
        its logprobs."""
        self.counter += 1
        if mu is not None:
            self.mu = mu
        if self.constraint is not None:
            self.constraint.consume(token)
        if self.logprobs is not None and logprob is not None:
            self.logprobs.append(self._logprob(token, logprob, top))

    def accept_row(self, token: int, row: np.ndarray | None) -> None:
        """A token the GPU sampler drew, with its logprob row (int32 [1 + alternatives, 2]) if asked."""
        if row is None or self.logprobs is None:
            self.accept(token)
            return
        vals = np.ascontiguousarray(row[:, 1]).view(np.float32)
        n = min(self.cfg.n_logprobs, row.shape[0] - 1)
        top = [(int(row[1 + i, 0]), float(vals[1 + i])) for i in range(n)]
        self.accept(token, None, float(vals[0]), top)

    def _logprob(self, token: int, logprob: float, top: Sequence[tuple[int, float]]) -> TokenLogprob:
        # alternatives at -inf (banned, masked by a constraint) are no alternatives
        return TokenLogprob(token, *self._piece(token), float(logprob),
                            tuple(TokenLogprob(t, *self._piece(t), float(lp)) for t, lp in top if lp > -np.inf))

    def _piece(self, token: int) -> tuple[str, bytes]:
        if token >= self._tokenizer.vocab_size:
            return "", b""
        b = self._tokenizer.token_to_piece(token, special=True)
        return b.decode("utf-8", "replace"), b
