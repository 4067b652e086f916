"""Continuous batching: many requests share one engine, step by step.

Every step the scheduler takes the requests that arrived, drops the cancelled ones (their blocks go back to
the pool at once), then fills one step within a token budget (the mixed plan's rows):

1. decode rows first: every running sequence whose prompt is done evaluates its newest token (one row);
2. then prompt chunks, as far as the budget goes: running sequences partway through their prompt, then
   waiting requests in arrival order while sequence slots and KV blocks last. A new request first takes
   the cached blocks of its longest known prefix (the prefix cache, ``kvcache.py``).

Every sequence in the step needs blocks for its rows. When the pool has none left, the youngest running
sequence is preempted: its blocks are released (full ones stay in the prefix cache, so the recompute is
often free) and it goes back to the front of the queue, to recompute its prompt and generated tokens
later and then go on exactly where it stopped. A request is never failed for lack of KV space: the pool
always holds at least one full context.

After the step, each sequence whose newest token was evaluated samples its next one from its own logits
row with its own settings (temperature, penalties, seed and counter: the same token batched or alone),
and its text goes through its own UTF-8 decoder and stop matcher. A finished sequence registers its full
blocks in the prefix cache and releases the rest.

On a backend with the GPU-resident loop, a lone sequence in its decode phase runs there: steps are queued
on the device back to back, the sampled ids never leave it, and the host takes them a batch at a time
(blocks for those steps are allocated before they are queued). Anything that changes the batch (a new
request, a cancel, the end) drops the loop after the batch already queued.

Threads: ``lock`` is held for a whole step; ``submit`` and ``cancel`` never wait for it (the inbox and the
cancel flag are read at the start of the next step). Streams step cooperatively: a consumer that needs its
next piece takes the lock and runs a step, which advances every running sequence, so one thread's step
serves all of them (``Engine``'s handles do this).
"""
from __future__ import annotations

import functools
import itertools
import threading
import time
import weakref
from collections import deque
from collections.abc import Callable, Iterator
from dataclasses import dataclass, field
from typing import TYPE_CHECKING, Any

import numpy as np

from ..backends.base import Step
from ..errors import OxigpuError
from .decoding import SequenceSampler
from .kvcache import KV_BLOCK, SeqBlocks
from .params import FinishReason, GenerationResult, SamplingParams, Timings
from .sampling import check_drawn
from .stops import StopMatcher

if TYPE_CHECKING:
    from .engine import Engine


@dataclass(eq=False)
class Request:
    """One sequence being generated: its tokens, its place in the cache and its output so far."""

    prompt: list[int]
    params: SamplingParams
    sampler: SequenceSampler                 # settings, RNG counter, constraint, logprobs (runtime/decoding.py)
    decoder: Callable[[int], str]            # token -> text (whole UTF-8 characters only)
    flush: Callable[[], str]                 # the text the decoder held back, at the end
    eog: frozenset[int]
    after: Request | None = None             # admitted only once this one's prompt is in the cache (n > 1)
    finish: Callable[[GenerationResult], GenerationResult] | None = None   # rewrites the result (tool calls)
    on_event: Callable[[Request], None] | None = None   # called (in the stepping thread) after new output

    tokens: list[int] = field(default_factory=list)     # prompt + generated
    computed: int = 0                                   # leading tokens whose K/V rows are in the cache
    blocks: SeqBlocks = field(default_factory=SeqBlocks)
    generated: list[int] = field(default_factory=list)
    pieces: deque[tuple[str, list[int]]] = field(default_factory=deque)   # (text, its ids), not yet taken
    text: list[str] = field(default_factory=list)                         # every piece emitted
    result: GenerationResult | None = None
    cancelled: bool = False
    released: bool = False                   # the scheduler is done with it: out of its queues, blocks freed
    arrival: int = -1
    preemptions: int = 0

    t_submit: float = 0.0
    t_start: float | None = None             # first scheduled
    t_first: float | None = None             # first token sampled
    cached: int | None = None                # prompt tokens found in the prefix cache at first admission

    def __post_init__(self) -> None:
        self.tokens = list(self.prompt)
        self.stops = StopMatcher(self.params.stop)
        self.held: list[int] = []            # ids whose text is not emitted yet (held back by the stops)

    @property
    def done(self) -> bool:
        return self.result is not None or self.cancelled

    @property
    def logprobs(self) -> list | None:
        """The logprobs of the tokens drawn so far (TokenLogprob each), when asked for."""
        lp = self.sampler.logprobs
        return None if lp is None else lp[:len(self.generated)]

    @property
    def remaining(self) -> int:
        """Tokens still to evaluate before this sequence can sample (1 in its decode phase)."""
        return len(self.tokens) - self.computed


class Scheduler:
    """Admission, batching, preemption and cancellation over one engine (see the module docstring)."""

    def __init__(self, engine: Engine):
        # the engine owns its scheduler: a weak reference back, so a dropped LLM frees its weights and device
        # buffers at once instead of waiting for the cycle collector (which large arrays rarely trigger)
        self._engine = weakref.ref(engine)
        self.pool = engine.pool
        self.lock = threading.RLock()
        self._inbox: deque[Request] = deque()
        self.waiting: list[Request] = []          # by arrival
        self.running: list[Request] = []          # by arrival, oldest first
        self._arrivals = itertools.count()
        self._stream: Iterator | None = None     # the GPU-resident loop, when running
        self._deferred: dict[int, Request] | None = None   # requests with new output while a batch of ids is taken
        self._stream_reqs: list[Request] = []    # its sequences, slot by slot
        self._stream_left = 0                    # its steps not yet read back
        self._stream_masked = False              # it draws constrained sequences a run of steps at a time
        self.steps = 0
        self.resident_steps = 0                  # steps whose ids came from the GPU-resident loop
        self.token_s = 0.0
        """The loop's seconds per step of one sequence at its steady rate (a moving average over the time
        between a stream's batches, its first batch left out: it carries the loop's start): speculative
        decoding weighs its rounds against it."""
        self._batch_t: float | None = None       # when the stream's last batch was taken
        self.preemptions = 0

    # -- from any thread ------------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        engine = self._engine()
        if engine is None:
            raise OxigpuError("the engine of this scheduler is gone (its LLM was closed or dropped)")
        return engine

    def submit(self, req: Request) -> Request:
        req.arrival = next(self._arrivals)
        req.t_submit = time.perf_counter()
        self._inbox.append(req)
        return req

    def cancel(self, req: Request) -> None:
        """Stop ``req``: no further token is drawn for it; its blocks are freed at the start of the next step."""
        req.cancelled = True

    def stats(self) -> dict[str, int]:
        return {"waiting": len(self.waiting) + len(self._inbox), "running": len(self.running),
                "kv_blocks_used": self.pool.n_used, "kv_blocks_total": self.pool.n_blocks,
                "kv_blocks_cached": self.pool.n_cached, "preemptions": self.preemptions}

    @property
    def idle(self) -> bool:
        return not (self._inbox or self.waiting or self.running)

    def reap(self) -> None:
        """Take new and cancelled requests into account now (cancelled ones free their blocks), if no step is
        running; a running step does it at its start anyway."""
        if self.lock.acquire(blocking=False):
            try:
                self._take_inbox()
            finally:
                self.lock.release()

    def make_room(self, seq: SeqBlocks, n_tokens: int) -> None:
        """Blocks for ``n_tokens`` rows in ``seq`` (an evaluation outside the requests), preempting running
        requests, youngest first, while the pool is short. Holding the lock."""
        self.quiesce()
        while not self.pool.grow(seq, n_tokens):
            if not self.running:
                raise AssertionError("the pool holds a full context, yet it could not give one")
            self._preempt(max(self.running, key=lambda r: r.arrival))

    # -- stepping (holding the lock) ------------------------------------------------------------------------
    def step(self) -> bool:
        """Run one step (or take one batch of the GPU-resident loop); False when there was nothing to do."""
        with self.lock:
            self._take_inbox()
            if self._settle_stream():
                self.steps += 1
                return True
            if self.engine.speculator is not None and self.engine.speculator.try_step(self):
                return True       # a speculative round for the lone decoding sequence (runtime/speculative.py)
            if self._resident_ok(live=self._stream is not None):
                return self._resident_step()
            self._drop_stream()
            batch = self._schedule()
            if not batch:
                return False
            self._run(batch)
            self.steps += 1
            return True

    def _take_inbox(self) -> None:
        while self._inbox:
            req = self._inbox.popleft()
            if req.cancelled:
                self._finish(req, None)
            elif req.params.max_tokens == 0:
                self._finish(req, "length")       # nothing to draw: not even the prompt is evaluated
            else:
                self.waiting.append(req)
        for req in [r for r in self.running + self.waiting if r.cancelled]:
            self._finish(req, None)

    def _schedule(self) -> list[tuple[Request, int]]:
        """The step's sequences and how many rows each evaluates (see the module docstring)."""
        eng = self.engine
        budget, slots = eng.step_rows, eng.max_seqs
        batch: list[tuple[Request, int]] = []
        taken: set[Request] = set()
        preempted: set[Request] = set()

        def younger(req: Request) -> list[Request]:
            return [r for r in self.running if r.arrival > req.arrival and r not in taken]

        for prompts in (False, True):             # decode rows first, then the prompts partway
            for req in list(self.running):
                if req not in self.running or req in taken or (req.remaining > 1) != prompts:
                    continue
                if budget <= 0 or len(batch) >= slots:
                    break
                take = min(req.remaining, budget)
                before = set(self.running)
                if self._reserve(req, take, younger(req)):
                    batch.append((req, take))
                    taken.add(req)
                    budget -= take
                preempted |= before - set(self.running)
        for req in list(self.waiting):
            if budget <= 0 or len(batch) >= slots or len(self.running) >= slots or req in preempted:
                break
            if req.after is not None and not (req.after.done or req.after.computed >= len(req.after.prompt)):
                continue                          # its prompt's blocks are still being computed by another
            if not self._admit(req, budget):
                break                             # first come, first served: no overtaking for blocks
            self.waiting.remove(req)
            self.running.append(req)
            self.running.sort(key=lambda r: r.arrival)
            take = min(req.remaining, budget)
            batch.append((req, take))
            taken.add(req)
            budget -= take
        return batch

    def _reserve(self, req: Request, take: int, younger: list[Request]) -> bool:
        """Blocks for ``req``'s next ``take`` rows, preempting the youngest of ``younger`` (running, not in
        this step yet) and, when that is not enough, ``req`` itself; False when ``req`` was preempted."""
        while not self.pool.grow(req.blocks, req.computed + take):
            victims = [r for r in younger if r in self.running]
            victim = max(victims, key=lambda r: r.arrival) if victims else req
            self._preempt(victim)
            if victim is req:
                return False
        return True

    def _admit(self, req: Request, budget: int) -> bool:
        """Place a waiting request in the cache: its cached prefix, then blocks for its first chunk."""
        limit = len(req.tokens) - 1               # the last token is always evaluated: its logits are needed
        matched = self.pool.match(req.blocks, req.tokens, limit)
        take = min(len(req.tokens) - matched, budget)
        if not self.pool.grow(req.blocks, matched + take):
            self.pool.release(req.blocks)
            return False
        req.computed = matched
        if req.cached is None:
            req.cached = matched
        if req.t_start is None:
            req.t_start = time.perf_counter()
        return True

    def _preempt(self, req: Request) -> None:
        self.pool.register(req.blocks, req.tokens, req.computed)
        self.pool.release(req.blocks)
        req.computed = 0
        req.preemptions += 1
        self.preemptions += 1
        self.running.remove(req)
        self.waiting.insert(0, req)
        self.waiting.sort(key=lambda r: r.arrival)

    def _run(self, batch: list[tuple[Request, int]]) -> None:
        """Evaluate the batch's rows, commit them, sample where a sequence's newest token was evaluated."""
        eng = self.engine
        seqs = [(req.tokens[req.computed:req.computed + n], req.computed, req.blocks.blocks) for req, n in batch]
        decode = all(n == 1 and req.remaining == 1 for req, n in batch)
        step = Step.batch(seqs)
        draws = [req if req.computed + n == len(req.tokens) else None for req, n in batch]
        drawn = eng.forward_sampled(step, decode, draws)     # the GPU sampler: ids read back, not logits
        logits = eng.forward(step, decode) if drawn is None else None
        for slot, (req, n) in enumerate(batch):
            req.computed += n
            self.pool.register(req.blocks, req.tokens, req.computed)
            if draws[slot] is None:
                continue
            if drawn is None:
                self._drawn(req, req.sampler.draw(logits[slot], req.tokens))
                continue
            ids, rows = drawn
            token = check_drawn(ids[slot], eng.vocab_size, len(req.generated))
            req.sampler.accept_row(token, None if rows is None else rows[slot])
            self._drawn(req, token)

    def _drawn(self, req: Request, token: int) -> None:
        """``token`` was drawn for ``req``; then the tokens its constraint forces are taken without a forward
        pass each (they are evaluated in one chunk next)."""
        self._accept(req, token)
        if not req.done:
            for forced in req.sampler.forced_tokens():
                self._accept(req, forced)
                if req.done:
                    break

    def _accept(self, req: Request, token: int) -> None:
        """``token`` was drawn for ``req``: record it, emit its text, finish the request when it ends."""
        if req.t_first is None:
            req.t_first = time.perf_counter()
        if token in req.eog:
            self._finish(req, "stop")
            return
        req.generated.append(token)
        req.tokens.append(token)
        req.held.append(token)
        text = req.stops.feed(req.decoder(token))
        if text:
            req.pieces.append((text, req.held))
            req.text.append(text)
            req.held = []
        if req.stops.stopped:
            self._finish(req, "stop")
        elif len(req.generated) >= req.params.max_tokens or len(req.tokens) > self.engine.n_ctx:
            self._finish(req, "length")
        elif req.on_event is not None:
            if self._deferred is not None:
                self._deferred[id(req)] = req
            else:
                req.on_event(req)

    def _finish(self, req: Request, reason: FinishReason | None) -> None:
        """End ``req`` (``reason`` None: cancelled, no result); its full blocks stay in the prefix cache."""
        if reason is not None:
            tail = req.stops.feed(req.flush()) + req.stops.flush()
            if tail or req.held:
                req.pieces.append((tail, req.held))
                req.text.append(tail)
                req.held = []
            result = GenerationResult("".join(req.text), list(req.generated), reason, self._timings(req),
                                      req.logprobs)
            req.result = req.finish(result) if req.finish is not None else result
        self.pool.register(req.blocks, req.tokens, req.computed)
        self.pool.release(req.blocks)
        if req in self.running:
            self.running.remove(req)
        if req in self.waiting:
            self.waiting.remove(req)
        if self._stream is not None and any(r is req for r in self._stream_reqs):
            self._stream.stop()                   # its queued steps still run; the next step takes their ids
        req.released = True
        if req.on_event is not None:
            req.on_event(req)

    def _timings(self, req: Request) -> Timings:
        now = time.perf_counter()
        start = req.t_start if req.t_start is not None else now
        first = req.t_first if req.t_first is not None else now
        return Timings(load_s=self.engine.load_s, prompt_tokens=len(req.prompt), cached_tokens=req.cached or 0,
                       prompt_s=first - start, generated_tokens=len(req.generated), generation_s=now - first,
                       queue_s=start - req.t_submit, preemptions=req.preemptions)

    # -- the GPU-resident loop ------------------------------------------------------------------------------
    def _resident_ok(self, live: bool = False) -> bool:
        """Every running sequence in its decode phase, nothing waiting, on a backend with the loop, each
        drawing with settings the device sampler keeps or under a constraint (whose masks go up a step at a
        time); a lone sequence may also have a constraint with host state (mirostat, DRY: one step per loop).
        ``live``: for the loop already running, where a constrained sequence may also have forced tokens
        still to evaluate (the loop takes them as steps drawn under one-token masks)."""
        if self.engine.backend.resident is None or self.waiting or self._inbox or not self.running:
            return False
        alone = len(self.running) == 1
        return all((r.remaining == 1 or (live and self._forced_ok(r))) and r.generated and not r.cancelled
                   and (_streamable(r) or (alone and r.sampler.constraint is not None)) for r in self.running)

    def _forced_ok(self, req: Request) -> bool:
        """Whether the running loop can evaluate ``req``'s forced tokens (those accepted, not yet computed)
        as its next steps: a loop that draws constrained sequences under masks, in it, and none of those
        tokens banned by a logit bias (a one-token mask on a banned token leaves nothing to draw)."""
        if not (self._stream_masked and req in self._stream_reqs):
            return False
        bias = req.params.logit_bias
        return not bias or all(bias.get(t, 0.0) != -np.inf for t in req.tokens[req.computed + 1:])

    def _resident_step(self, limit: int | None = None) -> bool:
        """One batch of the GPU-resident loop over the running sequences (started here when needed; a loop
        started with ``limit`` runs at most that many steps)."""
        eng = self.engine
        if self._stream is None:
            reqs = list(self.running)
            n_steps = min(min(r.params.max_tokens - len(r.generated), eng.n_ctx - len(r.tokens) + 1) for r in reqs)
            if limit is not None:
                n_steps = min(n_steps, limit)
            masks = None
            if not all(_streamable(r) for r in reqs):
                n_steps = 1                   # host state (mirostat's mu, DRY) depends on this draw
            elif any(r.sampler.constraint is not None for r in reqs):
                masks = functools.partial(_masks, reqs, -(-eng.vocab_size // 32), n_steps)
            # blocks for every position the queued steps write, taken before they are queued
            while n_steps >= 1 and not self._grow_all(reqs, n_steps):
                n_steps //= 2
            if n_steps < 1:
                return self._host_step()
            self._stream = eng.resident_stream(reqs, n_steps, masks)
            self._batch_t = None
            self._stream_reqs, self._stream_left, self._stream_masked = reqs, n_steps, masks is not None
        if self._take_stream():
            self.steps += 1
            return True
        self._drop_stream()
        return self._host_step()

    def _take_stream(self) -> bool:
        """Accept the stream's next batch of ids (False when it has none left). A constrained sequence's
        forced tokens are accepted with the draw before them; the loop then evaluates them as its next
        steps (drawn under one-token masks: ``_masks``), whose ids are checked, not accepted again. Anything
        that changes the batch (a sequence ends; forced tokens a loop cannot take) stops it: the batch
        already queued still comes out at the next step, then the loop restarts or gives way to a host
        step."""
        assert self._stream is not None
        ids, rows = next(self._stream, ((), None))
        now = time.perf_counter()
        if not ids:
            self._batch_t = None
            return False
        if self._batch_t is not None and len(self._stream_reqs) == 1:
            per = (now - self._batch_t) / len(ids)
            self.token_s = per if self.token_s == 0.0 else self.token_s + 0.25 * (per - self.token_s)
        self._batch_t = now
        reqs = self._stream_reqs
        running = set(self.running)
        self._stream_left -= len(ids)
        self.resident_steps += len(ids)
        changed = False
        # one event per request for the whole batch of steps, not one per token: a server streaming to many
        # clients then wakes its event loop and writes a chunk once per batch (the ids arrive together anyway)
        self._deferred = {}
        try:
            changed = self._accept_batch(ids, rows, reqs, running)
        finally:
            deferred, self._deferred = self._deferred, None
            for req in deferred.values():
                req.on_event(req)
        for req in reqs:
            if not req.done and req in running:
                self.pool.register(req.blocks, req.tokens, req.computed)
        if changed or self._stream_left <= 0:
            self._stream.stop()
        return True

    def _accept_batch(self, ids: Any, rows: Any, reqs: list[Request], running: set[Request]) -> bool:
        """Accept one batch of the loop's ids (steps x slots); True when the batch changed under it."""
        eng = self.engine
        changed = False
        for j, step_ids in enumerate(ids):
            for s, (req, token) in enumerate(zip(reqs, step_ids)):
                if req.done or req not in running or (req.remaining > 1 and not self._stream_masked):
                    continue                  # ended, preempted, or waits to evaluate forced tokens: ids dropped
                req.computed += 1             # the step that drew it evaluated the newest token
                if req.remaining > 0:         # it drew the next forced token, accepted already
                    if token != req.tokens[req.computed]:
                        raise RuntimeError(f"the GPU-resident loop drew {token} under the one-token mask of "
                                           f"forced token {req.tokens[req.computed]}")
                    continue
                check_drawn(token, eng.vocab_size, len(req.generated))   # the GPU sampler's -1: nothing drawable
                req.sampler.accept_row(token, None if rows is None else rows[s, j])
                self._drawn(req, token)
                changed |= req.done or (req.remaining > 1 and not self._forced_ok(req))
        return changed

    def _grow_all(self, reqs: list[Request], n_steps: int) -> bool:
        """Blocks for ``n_steps`` more rows of each of ``reqs``, all or none."""
        need = sum(max(0, -(-(len(r.tokens) + n_steps - 1) // KV_BLOCK) - len(r.blocks.blocks)) for r in reqs)
        if need > self.pool.n_free:
            return False
        return all(self.pool.grow(r.blocks, len(r.tokens) + n_steps - 1) for r in reqs)

    def _host_step(self) -> bool:
        batch = self._schedule()
        if batch:
            self._run(batch)
            self.steps += 1
        return bool(batch)

    def _settle_stream(self) -> bool:
        """When the batch changed under a running loop: take the ids of the batch it already queued (True:
        that was this step's work), else end it. Holding the lock."""
        if self._stream is None:
            return False
        if not (self._stream.stopped or self._stream_reqs != self.running or not self._resident_ok(live=True)):
            return False
        self._stream.stop()
        if self._take_stream():
            return True
        self._drop_stream()
        return False

    def quiesce(self) -> None:
        """End the GPU-resident loop, its queued ids taken (an evaluation outside the requests is about to
        write the plans' inputs the loop reads). Holding the lock."""
        while self._stream is not None:
            self._stream.stop()
            if not self._take_stream():
                self._drop_stream()

    def _drop_stream(self) -> None:
        """Abandon the resident loop: the GPU finishes what is already queued, its ids dropped; the blocks
        taken ahead for steps that never ran go back."""
        stream, reqs = self._stream, self._stream_reqs
        self._stream, self._stream_reqs, self._stream_masked = None, [], False
        if stream is not None:
            stream.close()
        for req in reqs:
            if req.blocks.blocks:
                self.pool.shrink(req.blocks, len(req.tokens))


def _streamable(req: Request) -> bool:
    """Whether ``req`` can stay in a multi-step GPU-resident loop: no host state between its draws but a
    constraint's mask (mirostat's mu and DRY's penalties are computed on the host)."""
    sampler = req.sampler
    return sampler.resident or (sampler.constraint is not None and not sampler.cfg.mirostat
                                and not sampler.dry.enabled)


def _masks(reqs: list[Request], words: int, limit: int) -> np.ndarray | None:
    """The constraint masks of ``reqs``' next draws (the loop's ``masks`` callback), rows up to the last
    constrained one (the others' rows are all ones): uint32 [k, rows, W] for a run of k steps. A sequence
    with m forced tokens still to evaluate (accepted with the draw before them) draws them under one-token
    masks, then under its constraint's mask; k is the shortest such run among the constrained sequences
    (at most ``limit``), so every draw of the run has its mask now and none is read back before the run's
    last. Only the draws after the forced tokens compute a constraint mask."""
    live = [(i, r) for i, r in enumerate(reqs) if not r.done and r.sampler.constraint is not None]
    if not live:
        return None
    k = max(1, min(limit, *(r.remaining for _, r in live)))   # remaining = 1 (the newest token) + forced
    out = np.full((k, live[-1][0] + 1, words), 0xFFFFFFFF, np.uint32)
    for i, r in live:
        forced = r.tokens[r.computed + 1:r.computed + 1 + k]
        for j, t in enumerate(forced):
            out[j, i] = 0
            out[j, i, t >> 5] = np.uint32(1 << (t & 31))
        if len(forced) < k:
            m = np.asarray(r.sampler.mask(), np.uint32).reshape(-1)
            out[len(forced), i, :m.size] = m
    return out
