"""Speculative decoding: cheap guesses of the next k tokens, checked by the model in one step.

A round, for a sequence in its decode phase (its newest token not evaluated yet):

1. **Draft** k tokens: with a draft model (a smaller model of the same vocabulary, its own KV cache, drawing
   each token from its own distribution q under the request's sampling settings) or by **prompt lookup**
   (the longest recent n-gram of the context that occurred before: the tokens that followed it, q a point
   mass on each).
2. **Verify**: the target model evaluates the newest token and the k drafts as k + 1 rows of one step
   (the teacher-forcing plan of k + 1 rows, logits of every row), so row i gives the target's distribution
   p_i after the context and drafts 1..i.
3. **Accept** (Leviathan et al. 2023, Chen et al. 2023): draft x_i is kept with probability
   min(1, p_i(x_i) / q_i(x_i)); at the first rejection the token is drawn from norm(max(0, p_i - q_i))
   instead and the round ends; when all k are kept, one more token comes from p_k. Every emitted token is
   then distributed exactly as plain sampling's. Greedy settings make p and q point masses: a draft is kept
   when it is the target's own choice, and the first mismatch is replaced by that choice, so greedy output is
   the plain decoder's (up to float rounding: the k + 1-row step sums in another order than a 1-row step,
   which can flip a near-tie, as a batch can).
4. **Roll back**: the cache rows of rejected drafts sit past the sequence's length, where the next step
   overwrites them before any query reads them (attention reads positions <= the query's); the blocks that
   hold only such rows go back to the pool. The draft model's cache keeps the longest prefix its tokens
   share with the accepted ones, the same way.

p and q both come from ``sampling.distribution``, the distribution the plain sampler draws from, with the
request's settings applied to each over its own context (drafts included): temperature, dynamic
temperature, top-k, top-p, min-p, typical-p, top-n-sigma, XTC (the same coin for p and q), logit bias,
repetition/presence/frequency penalties and DRY. Not supported (refused with InvalidParameterError when a
request asks for them): constraints (json, json_schema, grammar, regex, and so tool calls that force a
call), mirostat (its state moves with every token) and logprobs. The draws of a round use the request's
seed through their own RNG streams (accept, resample, draft), so a seed still fixes the output, but a
sampled output is not the plain decoder's token for token: only its distribution is the same.

Speculation runs when one sequence is active (the case it is for: it trades spare compute for latency);
with several, the scheduler batches them as usual and speculation resumes when one is left. Steps without
drafts take their tokens from the GPU-resident loop, and for greedy requests a gate holds rounds back where
they cost more than the plain tokens they stand for (:class:`_Gate`).
"""
from __future__ import annotations

import time
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends.base import Step
from ..errors import InvalidParameterError
from . import sampling
from .kvcache import KV_BLOCK, SeqBlocks
from .params import SamplingParams

if TYPE_CHECKING:
    from .engine import Engine
    from .scheduler import Request, Scheduler

METHODS = ("draft", "lookup")
ACCEPT_STREAM = 0x85EBCA6B
"""A draft token's acceptance test draws ``uniform(seed ^ ACCEPT_STREAM, counter)``."""
RESAMPLE_STREAM = 0xC2B2AE35
"""The correction (or extra) token of a round draws ``uniform(seed ^ RESAMPLE_STREAM, counter)``."""
DRAFT_STREAM = 0x27D4EB2F
"""The draft model draws its token ``counter`` with ``uniform(seed ^ DRAFT_STREAM, counter)``."""
PLAIN_BURST = 2
"""Tokens of the GPU-resident loop taken at once where a round has no drafts (lookup found none), before
drafting is tried again: a synced one-row step costs about two resident ones (dev/probe_verify.py)."""
HOLD_TOKENS = 64
"""Plain tokens (GPU-resident) taken before a round is tried again where rounds have lately cost more than
the tokens they gave would have taken plainly (:class:`_Gate`); doubled for each further losing round in a
row, up to ``HOLD_MAX``: each hold is one stream of the resident loop, and short streams cost their starts
(measured in docs/perf-log.md, tenth session)."""
HOLD_MAX = 256
GATE_EMA = 0.25
"""Weight of the newest measurement in the gate's moving averages."""
MAX_DRAFT = 32
"""Most draft tokens a round may verify (the verification step's rows are k + 1)."""

_METHOD_ALIASES = {"ngram": "lookup", "prompt_lookup": "lookup", "draft_model": "draft"}
_KEY_ALIASES = {"num_speculative_tokens": "num_tokens", "draft_max": "num_tokens", "prompt_lookup_max": "ngram",
                "prompt_lookup_min": "ngram_min", "draft_min": "min_tokens"}


@dataclass(frozen=True)
class SpeculativeConfig:
    """How to speculate: ``method`` "draft" (a draft model) or "lookup" (prompt lookup); ``num_tokens`` drafts
    per round (k); ``min_tokens``: a round with fewer drafts runs a plain step instead (lookup finds none, or
    the end is near); lookup matches the longest n-gram of ``ngram`` down to ``ngram_min`` tokens."""

    method: str = "draft"
    num_tokens: int = 5
    min_tokens: int = 1
    ngram: int = 3
    ngram_min: int = 1

    def __post_init__(self) -> None:
        if self.method not in METHODS:
            raise InvalidParameterError(f"speculative method must be one of {', '.join(METHODS)}, got "
                                        f"{self.method!r}")
        for name, lo, hi in (("num_tokens", 1, MAX_DRAFT), ("min_tokens", 1, MAX_DRAFT), ("ngram", 1, 64),
                             ("ngram_min", 1, 64)):
            v = getattr(self, name)
            if isinstance(v, bool) or not isinstance(v, int) or not lo <= v <= hi:
                raise InvalidParameterError(f"speculative {name} must be an integer in {lo}..{hi}, got {v!r}")
        if self.min_tokens > self.num_tokens:
            raise InvalidParameterError(f"speculative min_tokens ({self.min_tokens}) exceeds num_tokens "
                                        f"({self.num_tokens})")
        if self.ngram_min > self.ngram:
            raise InvalidParameterError(f"speculative ngram_min ({self.ngram_min}) exceeds ngram ({self.ngram})")

    @classmethod
    def parse(cls, spec: Any, has_draft: bool) -> SpeculativeConfig | None:
        """``speculative=`` as given to ``LLM``: None (a draft model alone means method "draft"), a method
        name, a dict (``{"method": "lookup", "num_tokens": 5, "ngram": 3}``; vLLM's key names work too:
        ``num_speculative_tokens``, ``prompt_lookup_max``/``_min``, method "ngram") or a SpeculativeConfig."""
        if spec is None or spec is False:
            return cls("draft") if has_draft and spec is None else None
        if isinstance(spec, SpeculativeConfig):
            cfg = spec
        elif isinstance(spec, str):
            cfg = cls(_METHOD_ALIASES.get(spec, spec))
        elif isinstance(spec, Mapping):
            keys = {_KEY_ALIASES.get(str(k), str(k)): v for k, v in spec.items()}
            if "method" in keys:
                keys["method"] = _METHOD_ALIASES.get(str(keys["method"]), keys["method"])
            else:
                keys["method"] = "draft" if has_draft else "lookup"
            known = {"method", "num_tokens", "min_tokens", "ngram", "ngram_min"}
            unknown = sorted(set(keys) - known)
            if unknown:
                raise InvalidParameterError(f"unknown speculative setting(s) {', '.join(unknown)}; known: "
                                            f"{', '.join(sorted(known))}")
            cfg = cls(**keys)
        else:
            raise InvalidParameterError(f"speculative must be a method name ('draft', 'lookup'), a dict or "
                                        f"None, got {type(spec).__name__}")
        if cfg.method == "draft" and not has_draft:
            raise InvalidParameterError("speculative method 'draft' needs a draft model (draft_model=PATH or an "
                                        "LLM); for drafts without a second model use method 'lookup'")
        if cfg.method == "lookup" and has_draft:
            raise InvalidParameterError("a draft model was given with speculative method 'lookup': give one "
                                        "of them")
        return cfg


@dataclass
class SpeculativeStats:
    """Counters over every round so far: ``drafted`` tokens proposed and verified, ``accepted`` of them,
    ``emitted`` tokens the rounds produced (accepted ones plus one per round), ``plain_steps`` taken
    instead of a round (no draft), and the time spent drafting and verifying."""

    rounds: int = 0
    drafted: int = 0
    accepted: int = 0
    emitted: int = 0
    plain_steps: int = 0
    draft_s: float = 0.0
    verify_s: float = 0.0

    @property
    def acceptance_rate(self) -> float:
        return self.accepted / self.drafted if self.drafted else 0.0

    @property
    def tokens_per_round(self) -> float:
        return self.emitted / self.rounds if self.rounds else 0.0

    def as_dict(self) -> dict[str, float]:
        return {"rounds": self.rounds, "drafted": self.drafted, "accepted": self.accepted,
                "emitted": self.emitted, "plain_steps": self.plain_steps,
                "acceptance_rate": round(self.acceptance_rate, 4),
                "tokens_per_round": round(self.tokens_per_round, 3),
                "draft_s": round(self.draft_s, 4), "verify_s": round(self.verify_s, 4)}


# -- the sampling side (pure functions: the statistical tests drive them directly) ---------------------------
Dist = tuple[np.ndarray, np.ndarray]
"""A sparse distribution: (token ids, probabilities)."""


def pick(dist: Dist, u: float) -> int:
    """The token of ``dist`` at cumulative probability ``u`` in [0, 1) (inverse CDF)."""
    ids, p = dist
    cum = np.cumsum(p)
    i = int(np.searchsorted(cum, u * cum[-1], side="right"))
    return int(ids[min(i, len(ids) - 1)])


def prob(dist: Dist, token: int) -> float:
    ids, p = dist
    hit = np.flatnonzero(ids == token)
    return float(p[hit[0]]) if hit.size else 0.0


def residual(p: Dist, q: Dist) -> Dist:
    """norm(max(0, p - q)): where a rejected draft's replacement is drawn from."""
    ids = np.union1d(p[0], q[0])
    pp = np.zeros(ids.size)
    qq = np.zeros(ids.size)
    pp[np.searchsorted(ids, p[0])] = p[1]
    qq[np.searchsorted(ids, q[0])] = q[1]
    r = np.maximum(pp - qq, 0.0)
    total = r.sum()
    if total <= 0.0:       # p == q up to rounding, yet the draft was rejected: p itself is the answer
        return p
    keep = r > 0
    return ids[keep], r[keep] / total


def verify(drafts: Sequence[int], qs: Sequence[Dist] | None, ps: Sequence[Dist], seed: int, counter: int
           ) -> list[int]:
    """The tokens a round emits: the longest accepted prefix of ``drafts`` and one more token.

    ``ps[i]`` is the target's distribution after drafts[:i] (len(drafts) + 1 of them), ``qs[i]`` the one
    drafts[i] was drawn from (None: every draft a point mass, prompt lookup); ``counter`` is the RNG counter
    of the first token (the sequence's token index), ``seed`` the sampler's u32 seed."""
    out: list[int] = []
    for i, x in enumerate(drafts):
        c = counter + i
        p = ps[i]
        px = prob(p, x)
        q = (np.asarray([x]), np.ones(1)) if qs is None else qs[i]
        qx = prob(q, x)
        if px >= qx or sampling.uniform(seed ^ ACCEPT_STREAM, c) < px / qx:
            out.append(int(x))
            continue
        out.append(pick(residual(p, q), sampling.uniform(seed ^ RESAMPLE_STREAM, c)))
        return out
    c = counter + len(drafts)
    out.append(pick(ps[len(drafts)], sampling.uniform(seed ^ RESAMPLE_STREAM, c)))
    return out


def lookup(tokens: Sequence[int], k: int, ngram: int, ngram_min: int = 1) -> list[int]:
    """Prompt lookup: the up to ``k`` tokens that followed an earlier occurrence of the context's last n
    tokens (the latest one with k tokens after it, else the earliest), for the longest n from ``ngram``
    down to ``ngram_min`` that occurred ([] when none did)."""
    arr = np.asarray(tokens, np.int64)
    size = arr.size
    for n in range(min(ngram, size - 1), ngram_min - 1, -1):
        key = arr[size - n:]
        # windows starting at 0 .. size - n - 1 (the last window is the key itself)
        win = np.lib.stride_tricks.sliding_window_view(arr[:size - 1], n)
        hits = np.flatnonzero((win == key).all(axis=1))
        if hits.size:
            # the latest occurrence followed by k tokens; in a run that repeats right up to the end only
            # the earliest has that many after it, so short of k the longest continuation is taken
            full = hits[hits + n + k <= size]
            start = int(full[-1] if full.size else hits[0]) + n
            return arr[start:start + k].tolist()
    return []


# -- the engine side -------------------------------------------------------------------------------------------
def check_draft_compatible(target: Engine, draft: Engine) -> None:
    """Refuse a draft model whose tokens mean something else: the same vocabulary, token for token."""
    tv, dv = target.vocab_size, draft.vocab_size
    if tv != dv:
        raise InvalidParameterError(f"the draft model's vocabulary has {dv} tokens, the model's {tv}: speculative "
                                    f"decoding needs a draft model of the same vocabulary (the same family)")
    tt = target.model.metadata.get("tokenizer.ggml.tokens")
    dt = draft.model.metadata.get("tokenizer.ggml.tokens")
    if tt is not None and dt is not None and list(tt) != list(dt):
        first = next(i for i, (a, b) in enumerate(zip(tt, dt)) if a != b)
        raise InvalidParameterError(f"the draft model's token {first} is {dt[first]!r}, the model's {tt[first]!r}: "
                                    f"speculative decoding needs a draft model of the same vocabulary")
    if target.tokenizer.eog_ids != draft.tokenizer.eog_ids:
        raise InvalidParameterError("the draft model ends generation on other tokens than the model; speculative "
                                    "decoding needs a draft model of the same vocabulary")
    if draft.n_ctx < target.n_ctx:
        raise InvalidParameterError(f"the draft model's context ({draft.n_ctx}) is smaller than the model's "
                                    f"({target.n_ctx})")


def check_params(params: SamplingParams) -> None:
    """Refuse the settings speculation does not support (module docstring)."""
    if params.constrained:
        raise InvalidParameterError("speculative decoding does not support constrained output (json, json_schema, "
                                    "grammar, regex, or tools with tool_choice that forces a call); use an LLM "
                                    "without speculative=/draft_model= for it")
    if params.mirostat:
        raise InvalidParameterError("speculative decoding does not support mirostat (its state moves with every "
                                    "token); use the other samplers, or an LLM without speculation")
    if params.logprobs:
        raise InvalidParameterError("speculative decoding does not report logprobs; use an LLM without "
                                    "speculation for them")


@dataclass
class _Gate:
    """Whether rounds pay: a round (drafting, a synced verification) against the plain tokens it stands for
    at the GPU-resident loop's steady rate (``Scheduler.token_s``: no host round trip per token), as moving
    averages of a round's seconds and tokens. Where ``tokens * token_s`` falls short of ``round_s`` (text
    that does not repeat the context, a draft model nearly as slow as the model), the next ``HOLD_TOKENS``
    (doubled per further loss in a row) come plainly, then a round is tried again: speculation then costs
    little where it cannot gain, and resumes where the text starts to follow its drafts. Before the loop's
    rate is known, the first measured round is followed by such a burst, which measures it. A backend without
    the loop (numpy) measures its plain host steps instead (``host_s``). Greedy requests only (their tokens
    are the plain decoder's either way); a sampled request's seed must fix its output, so its rounds do not follow
    timings."""

    round_s: float = 0.0
    tokens: float = 0.0
    hold: int = 0
    losses: int = 0
    """Losing rounds in a row (each doubles the next hold)."""
    seen: bool = False
    """The first round was seen (its time dropped: a first use may compile a pipeline)."""
    host_s: float = 0.0
    """A plain host step's seconds (moving average), the yardstick where the backend has no resident loop."""

    def worth(self, token_s: float) -> bool:
        return self.round_s == 0.0 or token_s <= 0.0 or self.tokens * token_s >= self.round_s

    def round(self, seconds: float, tokens: int, token_s: float) -> None:
        if not self.seen:
            self.seen = True
            return
        first = self.round_s == 0.0
        self.round_s = _ema(self.round_s, seconds, first)
        self.tokens = _ema(self.tokens, tokens, first)
        if token_s <= 0.0:
            self.hold = HOLD_TOKENS         # a plain burst measures the loop's rate
        elif not self.worth(token_s):
            self.hold = min(HOLD_MAX, HOLD_TOKENS << self.losses)
            self.losses += 1
        else:
            self.losses = 0

    def plain(self, tokens: int, host_seconds: float = 0.0) -> None:
        self.hold = max(0, self.hold - tokens)
        if host_seconds > 0.0 and tokens > 0:
            self.host_s = _ema(self.host_s, host_seconds / tokens, self.host_s == 0.0)


def _ema(old: float, new: float, first: bool) -> float:
    """The gate's moving average: ``new`` alone for the first measurement."""
    return new if first else old + GATE_EMA * (new - old)


@dataclass
class _DraftCache:
    """The draft model's one sequence: its blocks and the tokens whose rows they hold. It lives as long as its
    Speculator, across requests; :meth:`Speculator.close` gives its blocks back."""

    blocks: SeqBlocks = field(default_factory=SeqBlocks)
    tokens: list[int] = field(default_factory=list)


class Speculator:
    """Speculative rounds for an engine's lone decoding sequence (module docstring). The scheduler calls
    :meth:`try_step` at the start of each step, holding its lock."""

    def __init__(self, engine: Engine, config: SpeculativeConfig, draft: Engine | None = None):
        if (config.method == "draft") != (draft is not None):
            raise InvalidParameterError("speculative method 'draft' needs a draft model, and only it takes one")
        if draft is not None:
            check_draft_compatible(engine, draft)
        self.engine, self.config, self.draft = engine, config, draft
        self.stats = SpeculativeStats()
        self._cache = _DraftCache()
        self._gate = _Gate()
        self._burst: tuple[Any, Request, int] | None = None
        """The plain burst under way: its GPU-resident stream, its request and that request's tokens then."""
        self.verify_plan = engine.plan("all", config.num_tokens + 1, 1)

    def close(self) -> None:
        """Give the draft model's cache blocks back to its pool (registered ones stay in its prefix cache, for
        the next speculator on that model to match). The cache outlives requests, so a speculator that is
        replaced (``LLM.speculate``) must call this: otherwise its blocks stay referenced for good, and a
        draft model toggled on and off leaks the blocks of a context each time until it cannot draft."""
        if self.draft is None:
            return
        with self.draft.lock:
            self.draft.pool.release(self._cache.blocks)
            self._cache.tokens.clear()

    # -- from the scheduler ----------------------------------------------------------------------------------
    def try_step(self, sched: Scheduler) -> bool:
        """Run a round (or, without drafts or while the gate holds rounds back, plain tokens: :meth:`_plain`)
        when exactly one sequence is running and in its decode phase; False (nothing done) otherwise, for
        the scheduler's usual step (which also takes a plain burst's later batches)."""
        if len(sched.running) != 1 or sched.waiting or sched._inbox:
            return False
        req = sched.running[0]
        if req.cancelled or req.remaining != 1:
            return False
        if self._burst is not None:
            stream, breq, bgen = self._burst
            if sched._stream is stream and breq is req:
                return False         # the plain burst's GPU-resident loop goes on (the scheduler's step)
            self._burst = None
            if breq is req:
                self._gate.plain(len(req.generated) - bgen)
        sched._drop_stream()
        eng = self.engine
        k = min(self.config.num_tokens, req.params.max_tokens - len(req.generated) - 1,
                eng.n_ctx - len(req.tokens))
        drafts: list[int] = []
        qs: list[Dist] | None = None
        t0 = time.perf_counter()
        # only greedy requests are gated: the gate's choices follow timings, and a sampled request's tokens
        # depend on which of its draws were a round's (its seed must fix its output)
        gated = req.sampler.cfg.greedy
        if k >= self.config.min_tokens and not (gated and self._gate.hold > 0):
            drafts, qs = self._propose(req, k)
        if len(drafts) < self.config.min_tokens or not eng.pool.grow(req.blocks, req.computed + 1 + len(drafts)):
            return self._plain(sched, req)
        t1 = time.perf_counter()
        rows = [req.tokens[-1], *drafts]
        step = Step.single(rows, req.computed, req.blocks.blocks)
        s = req.sampler
        out = self._verify_greedy_on_device(req, step, drafts)
        if out is None:
            logits = eng.backend.run(self.verify_plan, step)["logits"]
            ps, context = [], list(req.tokens)
            for i in range(len(rows)):
                ps.append(_dist(logits[i], s, context, s.counter + i))
                if i < len(drafts):
                    context.append(drafts[i])
            out = verify(drafts, qs, ps, s.cfg.seed, s.counter)
        self.stats.draft_s += t1 - t0
        self.stats.verify_s += time.perf_counter() - t1
        self.stats.rounds += 1
        self.stats.drafted += len(drafts)
        self.stats.accepted += len(out) - 1
        self.stats.emitted += len(out)
        for token in out:
            req.computed += 1              # the row that gave this token's distribution is now the sequence's
            sampling.check_drawn(token, eng.vocab_size, s.counter)
            s.accept(token)
            sched._accept(req, token)
            if req.done:
                break
        if not req.done:
            eng.pool.register(req.blocks, req.tokens, req.computed)
            eng.pool.shrink(req.blocks, len(req.tokens))      # the blocks only rejected drafts' rows were in
        if gated:
            self._gate.round(time.perf_counter() - t0, len(out), sched.token_s or self._gate.host_s)
        sched.steps += 1
        return True

    def _plain(self, sched: Scheduler, req: Request) -> bool:
        """Plain tokens instead of a round: a burst of the GPU-resident loop (``PLAIN_BURST`` tokens, or what
        the gate holds back), whose later batches the scheduler takes as its own steps; a synced host step
        where the loop cannot run this sequence."""
        before = len(req.generated)
        if not sched._resident_ok():
            t0 = time.perf_counter()
            done = sched._host_step()
            n = len(req.generated) - before
            self.stats.plain_steps += max(1, n)
            self._gate.plain(n, time.perf_counter() - t0)
            return done
        n = min(max(PLAIN_BURST, self._gate.hold), req.params.max_tokens - len(req.generated),
                self.engine.n_ctx - len(req.tokens) + 1)
        done = sched._resident_step(limit=n)
        self.stats.plain_steps += n         # queued (a stop string or an end token may end them sooner)
        self._burst = (sched._stream, req, before) if sched._stream is not None else None
        if self._burst is None:
            self._gate.plain(len(req.generated) - before)
        return done

    def _verify_greedy_on_device(self, req: Request, step: Step, drafts: list[int]) -> list[int] | None:
        """Greedy verification with the GPU sampler on every row of the verification step: the ids of its
        rows cross the bus, not [k + 1, vocab] logits, and the host compares them with the drafts (greedy
        acceptance: drafts up to the first that differs from its row's id, then that id). None where the
        backend has no GPU sampler or the sequence does not draw greedily (the rejection scheme then runs
        on the host, on the logits)."""
        eng, s = self.engine, req.sampler
        run = getattr(eng.backend.resident, "run_sampled", None)
        if run is None or not s.cfg.greedy or s.cfg.mirostat:
            return None
        S = self.verify_plan.outputs["logits"].shape[0]
        contexts: list[list[int] | None] = [list(req.tokens) + drafts[:i] for i in range(len(drafts) + 1)]
        contexts += [None] * (S - len(contexts))            # the plan's rows past the step draw nothing
        slots = sampling.pack_batch([s.cfg] * S, [len(c) if c else 1 for c in contexts],
                                    [s.counter + i for i in range(S)], [s.mu] * S,
                                    [s.adjust(c) if c else None for c in contexts], None, vocab=eng.vocab_size)
        ids, _ = run(self.verify_plan, step, slots, contexts)
        out = []
        for i in range(len(drafts) + 1):
            out.append(int(ids[i]))
            if i == len(drafts) or ids[i] != drafts[i]:
                break
        return out

    # -- drafting --------------------------------------------------------------------------------------------
    def _propose(self, req: Request, k: int) -> tuple[list[int], list[Dist] | None]:
        """k drafts after the request's tokens and the distribution each was drawn from (None: point masses)."""
        if self.draft is None:
            c = self.config
            return lookup(req.tokens, k, c.ngram, c.ngram_min), None
        d = self.draft
        s = req.sampler
        with d.lock:        # a draft model that is also an LLM of its own: never two steps at once
            if s.cfg.greedy and s.resident and d.backend.resident is not None:
                drafts = self._draft_resident(d, req, k)
                return drafts, [(np.asarray([x]), np.ones(1)) for x in drafts]
            context = list(req.tokens)
            logits = self._fill(d, context, need_logits=True)
            drafts: list[int] = []
            qs: list[Dist] = []
            for i in range(k):
                assert logits is not None
                q = _dist(logits, s, context, s.counter + i)
                x = pick(q, sampling.uniform(s.cfg.seed ^ DRAFT_STREAM, s.counter + i))
                drafts.append(x)
                qs.append(q)
                context.append(x)
                if i + 1 < k:                      # the last draft's own logits are not needed
                    logits = self._fill(d, context, need_logits=True)
            return drafts, qs

    def _draft_resident(self, d: Engine, req: Request, k: int) -> list[int]:
        """Greedy drafts on the draft model's GPU-resident loop: k decode steps queued at once, the ids read
        back a batch at a time (the device sampler picks what the host's greedy choice would)."""
        context = list(req.tokens)
        self._fill(d, context[:-1], need_logits=False)     # the loop's first step evaluates the last token
        cache = self._cache
        if not d.pool.grow(cache.blocks, len(context) - 1 + k):
            raise AssertionError("the draft model's pool holds a full context, yet it could not give one")
        resident = d.backend.resident
        assert resident is not None
        drafts: list[int] = []
        stream = resident.decode_batch(d.decode_plan, [context], req.sampler.slot_batch(context), k,
                                       [cache.blocks.blocks], whole=True)     # one read-back for the k
        try:
            for ids, _ in stream:
                drafts += [step[0] for step in ids]
        finally:
            stream.close()
        if any(x < 0 for x in drafts):          # nothing drawable (the device's -1): draft no further
            drafts = drafts[:next(i for i, x in enumerate(drafts) if x < 0)]
        # the steps wrote the rows of the last token and of every draft but the last
        cache.tokens = context + drafts[:max(0, len(drafts) - 1)] if drafts else context[:-1]
        d.pool.register(cache.blocks, cache.tokens, len(cache.tokens))
        return drafts

    def _fill(self, d: Engine, tokens: list[int], need_logits: bool) -> np.ndarray | None:
        """Make the draft model's cache hold ``tokens``: cut it back to the longest prefix it shares with them
        (``need_logits``: short of the last token at least) and evaluate the rest; the next-token logits
        after ``tokens`` when they were evaluated (always with ``need_logits``)."""
        cache, pool = self._cache, d.pool
        common = _common_prefix(cache.tokens, tokens)
        limit = len(tokens) - 1 if need_logits else len(tokens)
        common = min(common, limit)
        if not cache.blocks.blocks:                           # a new cache: what the prefix cache holds
            cache.tokens = tokens[:pool.match(cache.blocks, tokens, limit)]
        elif common < len(cache.tokens):
            if common < cache.blocks.n_hashed * KV_BLOCK:   # into blocks shared through the prefix cache
                pool.release(cache.blocks)
                cache.tokens = tokens[:pool.match(cache.blocks, tokens, limit)]
            else:
                del cache.tokens[common:]
                pool.shrink(cache.blocks, common)
        start = len(cache.tokens)
        logits = None
        while start < len(tokens):
            count = min(d.prefill_chunk, len(tokens) - start)
            if not pool.grow(cache.blocks, start + count):
                raise AssertionError("the draft model's pool holds a full context, yet it could not give one")
            chunk = tokens[start:start + count]
            # queued unread where no logits are wanted: the draft steps after it run on the same queue
            logits = d.forward(Step.single(chunk, start, cache.blocks.blocks), count == 1,
                               read=need_logits and start + count >= len(tokens))
            cache.tokens += chunk
            start += count
            pool.register(cache.blocks, cache.tokens, start)
        return None if logits is None else np.asarray(logits).reshape(-1)


def _dist(logits: np.ndarray, s: Any, context: list[int], counter: int) -> Dist:
    """``sampling.distribution`` for sequence sampler ``s`` after ``context``; plain greedy settings (no bias,
    penalties or DRY) take the argmax (the lowest id among equal maxima, as the sampler's order does)
    without the chain's pass over the vocabulary."""
    cfg = s.cfg
    if cfg.greedy and not cfg.logit_bias and not s.dry.enabled and (
            cfg.penalty_last_n <= 0 or (cfg.repeat_penalty == 1 and cfg.presence_penalty == 0
                                        and cfg.frequency_penalty == 0)):
        j = int(np.argmax(logits))
        if np.isfinite(logits[j]):
            return np.asarray([j]), np.ones(1)
    return sampling.distribution(logits, cfg, context, counter, None, s.adjust(context))


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    if n == 0:
        return 0
    diff = np.flatnonzero(np.asarray(a[:n]) != np.asarray(b[:n]))
    return int(diff[0]) if diff.size else n
