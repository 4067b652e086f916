"""The engine: one model on one backend, its paged KV cache, its plans and the scheduler that runs them.

Plans are compiled per bucket, on first use (a plan is built once and kept): decode plans of T = S rows, one
per sequence, for S in 1, 2, 4, ... up to ``max_seqs``; mixed plans of ``prefill_chunk`` rows (prompt
chunks beside decode rows) for one sequence and for ``max_seqs``; the teacher-forcing plan (``prefill_chunk``
rows, the logits of every row). One sequence alone runs the S = 1 plans, the same kernels as a batch of one.

The KV cache is a pool of blocks (``kvcache.py``) sized at start from a memory budget (``kv_memory``), and
the scheduler (``scheduler.py``) shares it among the requests it batches. Requests are made by ``start``
(one) and ``submit``; ``Generation`` is a request's handle: iterating it yields text as it is produced,
running scheduler steps in the caller's thread when the next piece is not there yet (see the scheduler's
docstring for the threading rules).

``eval`` and ``eval_all`` evaluate token lists outside any request (next-token logits with prefix reuse;
teacher-forced logits), under the scheduler's lock, preempting running requests if they need the blocks.
"""
from __future__ import annotations

import codecs
import time
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from ..backends.base import Backend, Step
from ..errors import ContextLengthError, InvalidParameterError, TokenizerError
from ..gguf import GGUFFile
from ..graph.plan import Plan
from ..graph.plan import compile as compile_plan
from ..models import HParams, build_graph
from ..quant import kvcache as kvq
from ..tokenizer import Tokenizer
from .constraints import Constraint
from .decoding import SequenceSampler, sampler_config
from .kvcache import KV_BLOCK, BlockPool, SeqBlocks, block_bytes, pool_blocks
from .params import GenerationResult, SamplingParams
from .sampling import SamplerConfig, pack_batch
from .scheduler import Request, Scheduler
from .speculative import Speculator
from .speculative import check_params as check_speculative

BACKENDS = ("auto", "wgpu", "numpy")
DEFAULT_N_CTX = 4096

Progress = Callable[[str, int, int], None]
"""Load progress callback: (stage description, stages done, stages total)."""


def select_backend(requested: str) -> str:
    """The backend that `requested` ("auto" | "wgpu" | "numpy") resolves to on this machine.

    This is the one place "auto" is decided: wgpu on a hardware GPU adapter; numpy on a software one
    (lavapipe/llvmpipe, which numpy outruns) and, with one warning line, when there is no usable adapter.
    """
    if requested not in BACKENDS:
        raise InvalidParameterError(f"unknown backend {requested!r}; choose one of {', '.join(BACKENDS)}")
    if requested != "auto":
        return requested
    from ..backends.wgpu.backend import auto_backend
    return auto_backend()


def _make_backend(name: str, model, n_ctx: int) -> Backend:
    if name == "numpy":
        from ..backends.numpy_backend import NumpyBackend
        return NumpyBackend(model, n_ctx)
    from ..backends.wgpu.backend import WgpuBackend
    return WgpuBackend(model, n_ctx)    # DeviceError (with an install hint) when there is no usable adapter


def resolve_n_ctx(requested: int | None, n_ctx_train: int) -> int:
    """The context size to allocate: `requested`, else 4096, never above what the model was trained on."""
    if requested is None:
        return min(DEFAULT_N_CTX, n_ctx_train)
    if isinstance(requested, bool) or not isinstance(requested, int) or requested < 1:
        raise InvalidParameterError(f"n_ctx must be a positive integer, got {requested!r}")
    if requested > n_ctx_train:
        raise InvalidParameterError(
            f"n_ctx={requested} exceeds the {n_ctx_train} tokens this model was trained on; "
            f"use n_ctx <= {n_ctx_train}")
    return requested


DEFAULT_MAX_SEQS = {"numpy": 8, "wgpu": 64}
"""Sequences decoded together by default: a CPU's BLAS gains little past a few rows; a GPU reads each
weight once for up to 64 (the largest decode bucket)."""
MAX_SEQS = 64


def resolve_max_seqs(requested: int | None, backend: Backend, prefill_chunk: int) -> int:
    """Sequences one step may hold: ``requested`` or the backend's default, at most ``prefill_chunk`` (a
    step's rows) and 64; 1 on a backend whose kernels do not read block tables."""
    if requested is not None and (isinstance(requested, bool) or not isinstance(requested, int)
                                  or not 1 <= requested <= MAX_SEQS):
        raise InvalidParameterError(f"max_seqs must be an integer in 1..{MAX_SEQS}, got {requested!r}")
    if not backend.paged:
        return 1
    n = requested or DEFAULT_MAX_SEQS.get(backend.name, 8)
    return max(1, min(n, prefill_chunk))


class Engine:
    """A loaded model: tokenizer, backend, plans, the KV block pool and the scheduler (module docstring)."""

    def __init__(self, model_path: str | Path, backend: str = "auto", n_ctx: int | None = None,
                 prefill_chunk: int | None = None, progress: Progress | None = None, max_seqs: int | None = None,
                 kv_memory: int | None = None, cache_type_k: str = "f16", cache_type_v: str = "f16"):
        t0 = time.perf_counter()
        self.cache_types = (kvq.check_type(cache_type_k, "cache_type_k"),
                            kvq.check_type(cache_type_v, "cache_type_v"))
        """The K and V caches' types (llama.cpp's -ctk / -ctv; quant/kvcache.py)."""
        report = progress or (lambda stage, done, total: None)
        stages = 5
        self.backend_name = select_backend(backend)
        report("reading GGUF", 0, stages)
        self.model_path = Path(model_path)
        self.model = GGUFFile(self.model_path)
        self.hparams = HParams.from_gguf(self.model)
        report("building tokenizer", 1, stages)
        tokens = self.model.metadata.get("tokenizer.ggml.tokens")
        if isinstance(tokens, list) and len(tokens) != self.hparams.n_vocab:   # checked before building it;
            raise TokenizerError(                                                # else ids fail mid-stream
                f"the tokenizer has {len(tokens)} tokens but the model's vocabulary is {self.hparams.n_vocab} "
                f"({self.hparams.arch}.vocab_size)")
        self.tokenizer = Tokenizer.from_metadata(self.model.metadata)
        self.n_ctx = resolve_n_ctx(n_ctx, self.hparams.n_ctx_train)
        hp = self.hparams
        for kind, width in zip(self.cache_types, (hp.n_head_kv * hp.head_dim, hp.n_head_kv * hp.head_dim_v)):
            kvq.check_width(kind, width)
        self.backend = _make_backend(self.backend_name, self.model, self.n_ctx)
        # None: the backend's own default (the chunk that suits its hardware)
        chunk = prefill_chunk or self.backend.prefill_chunk
        self.prefill_chunk = max(1, min(chunk, self.n_ctx))
        self.max_seqs = resolve_max_seqs(max_seqs, self.backend, self.prefill_chunk)
        self.step_rows = self.prefill_chunk
        """Rows of a mixed step: the scheduler's token budget per step."""
        self.pool = BlockPool(self._pool_blocks(kv_memory), contiguous=not self.backend.paged)
        self._plans: dict[tuple[str, int, int], Plan] = {}
        report("compiling plans", 2, stages)
        report("loading weights", 3, stages)
        self.prefill_plan                    # noqa: B018  (compiled and loaded now: a first request waits less)
        report("loading weights", 4, stages)
        self.decode_plan                     # noqa: B018
        report("ready", 5, stages)
        self.scheduler = Scheduler(self)
        self.lock = self.scheduler.lock
        self.speculator: Speculator | None = None
        """Speculative decoding (``runtime/speculative.py``), when the LLM was given a draft model or lookup."""
        self.load_s = time.perf_counter() - t0

    def _pool_blocks(self, kv_memory: int | None) -> int:
        hp = self.hparams
        row = max(kvq.row_bytes(t, hp.n_head_kv * d)                       # bytes of a K or V row
                  for t, d in zip(self.cache_types, (hp.head_dim, hp.head_dim_v)))
        per_block = block_bytes(hp, *self.cache_types)
        rows = self.backend.max_cache_rows(row)
        seqs = self.max_seqs if self.backend.paged else 1
        return pool_blocks(per_block, self.n_ctx, seqs, kv_memory, self.backend.kv_budget(),
                           None if rows is None else rows // KV_BLOCK,
                           f"the adapter's limit of {(rows or 0) * row} bytes per cache buffer")

    @property
    def vocab_size(self) -> int:
        return self.hparams.n_vocab

    # -- plans ----------------------------------------------------------------------------------------------
    def plan(self, kind: str, T: int, S: int) -> Plan:
        """The plan of ``kind`` ("decode": T == S rows, one per sequence; "mixed": the last row of each of S
        sequences; "all": every row's logits) for T rows and S sequences, compiled and loaded on first use."""
        key = (kind, T, S)
        plan = self._plans.get(key)
        if plan is None:
            g = build_graph(self.model, self.hparams, T, self.n_ctx, "all" if kind == "all" else "last", S=S,
                            n_blocks=self.pool.n_blocks, decode=kind == "decode", cache_types=self.cache_types)
            plan = compile_plan(g)
            self.backend.load(plan)
            self._plans[key] = plan
        return plan

    @property
    def prefill_plan(self) -> Plan:
        """The mixed plan of one sequence: prompt chunks of ``prefill_chunk`` rows."""
        return self.plan("mixed", self.prefill_chunk, 1)

    @property
    def decode_plan(self) -> Plan:
        """The decode plan of one sequence (what the GPU-resident loop runs, with the sampler after it)."""
        return self.plan("decode", 1, 1)

    @property
    def logits_plan(self) -> Plan:
        """The teacher-forcing plan: ``prefill_chunk`` rows of one sequence, logits of every row."""
        return self.plan("all", self.prefill_chunk, 1)

    def prepare(self, params: SamplingParams | None = None, progress: Progress | None = None) -> None:
        """Compile and load every plan a batch may need now (the decode buckets up to ``max_seqs`` and the
        mixed plan of ``max_seqs``), and with ``params`` the GPU-resident loop's sampler for that kind of
        settings on each bucket, instead of on first use: a server does it before taking requests, so no
        request waits for a compile (seconds each on a GPU, in the middle of a batch)."""
        resident = self.backend.resident
        cfg = sampler_config(params, self.n_ctx, params.seed or 0) if params is not None else None

        def slots(S: int) -> Any:
            return pack_batch([cfg] * S, [1] * S, [0] * S, vocab=self.vocab_size)
        buckets = [1]
        while buckets[-1] < self.max_seqs:
            buckets.append(self.decode_bucket(buckets[-1] + 1))
        mixed = (1, self.max_seqs) if self.max_seqs > 1 else (1,)
        total = len(buckets) + len(mixed)
        plans = []
        for b in buckets:
            if progress is not None:
                progress(f"warming up: {b} at once", len(plans), total)
            plan = self.plan("decode", b, b)
            plans.append(plan)
            if cfg is not None and resident is not None:
                resident.resident_step(plan, slots(b))
        for S in mixed:
            if progress is not None:
                progress(f"warming up: prompts of {S} sequence{'s' * (S > 1)}", len(plans), total)
            plans.append(self.plan("mixed", self.prefill_chunk, S))
        if cfg is not None and resident is not None:      # host steps draw on the GPU too (run_sampled)
            for plan in plans:
                resident.prepare_sampled(plan, slots(plan.outputs["logits"].shape[0]))
        if progress is not None:
            progress("warm", total, total)

    def decode_bucket(self, n_seqs: int) -> int:
        """The decode plan size for ``n_seqs`` sequences: the next power of two, at most ``max_seqs``."""
        return min(1 << max(0, n_seqs - 1).bit_length(), self.max_seqs)

    def forward(self, step: Step, decode: bool, read: bool = True,
                meanwhile: Callable[[], None] | None = None) -> np.ndarray | None:
        """Run ``step`` (``decode``: one row per sequence) on the plan of its bucket; logits [n_seqs, vocab]
        (``read`` False: None, the step queued and its logits left unread; ``read`` and ``meanwhile`` as
        Backend.run's)."""
        if decode:
            b = self.decode_bucket(step.n_seqs)
            plan = self.plan("decode", b, b)
        else:
            plan = self.plan("mixed", self.prefill_chunk, 1 if step.n_seqs == 1 else self.max_seqs)
        out = self.backend.run(plan, step, read=read, meanwhile=meanwhile)
        return out["logits"][:step.n_seqs] if read else None

    def forward_sampled(self, step: Step, decode: bool, reqs: Sequence[Request | None]
                        ) -> tuple[list[int], np.ndarray | None] | None:
        """:meth:`forward`, with each sequence of ``reqs`` (None: a row that draws nothing, mid-prompt)
        drawing its next token with the GPU sampler in the same queue: the ids ([n_seqs]; and logprob rows
        when asked), not the [n_seqs, vocab] logits, cross the bus. None where the backend has no GPU
        sampler or a sequence draws with host state the device does not keep (mirostat's mu): the caller
        then draws from :meth:`forward`'s logits. Same tokens either way (the numpy twin and the GPU sampler
        agree: tests/test_sampling.py)."""
        resident = self.backend.resident
        run = getattr(resident, "run_sampled", None)
        if run is None or any(r is not None and r.sampler.cfg.mirostat for r in reqs):
            return None
        if decode:
            b = self.decode_bucket(step.n_seqs)
            plan = self.plan("decode", b, b)
        else:
            plan = self.plan("mixed", self.prefill_chunk, 1 if step.n_seqs == 1 else self.max_seqs)
        S = plan.outputs["logits"].shape[0]
        pad = S - len(reqs)
        live = [r for r in reqs if r is not None]
        if not live:
            return None
        contexts = [r.tokens if r is not None else None for r in reqs]
        slots = pack_batch([r.sampler.cfg if r is not None else SamplerConfig() for r in reqs]
                           + [SamplerConfig()] * pad,
                           [len(r.tokens) if r is not None else 1 for r in reqs] + [1] * pad,
                           [r.sampler.counter if r is not None else 0 for r in reqs] + [0] * pad,
                           [r.sampler.mu if r is not None else 0.0 for r in reqs] + [0.0] * pad,
                           [r.sampler.adjust(r.tokens) if r is not None else None for r in reqs] + [None] * pad,
                           [r.sampler.mask() if r is not None else None for r in reqs] + [None] * pad,
                           vocab=self.vocab_size)
        return run(plan, step, slots, contexts)

    def resident_stream(self, reqs: Sequence[Request], n_steps: int,
                        masks: Callable[[], np.ndarray | None] | None = None) -> Any:
        """The GPU-resident loop over ``reqs`` in their decode phase, one row each on the decode plan of their
        bucket (their blocks hold every position the steps write): ids a batch at a time ([step][sequence]),
        with logprob rows when asked ([sequence, step, ...]); ``masks``: constrained sequences, one step at a
        time, their masks computed while the forward runs (``ResidentDecode.decode_batch``)."""
        resident = self.backend.resident
        assert resident is not None
        b = self.decode_bucket(len(reqs))
        pad = b - len(reqs)
        contexts = [r.tokens for r in reqs]
        slots = pack_batch([r.sampler.cfg for r in reqs] + [SamplerConfig()] * pad,
                           [len(c) for c in contexts] + [1] * pad, [r.sampler.counter for r in reqs] + [0] * pad,
                           [r.sampler.mu for r in reqs] + [0.0] * pad,
                           [r.sampler.adjust(c) for r, c in zip(reqs, contexts)] + [None] * pad,
                           [r.sampler.mask() for r in reqs] + [None] * pad, vocab=self.vocab_size)
        return resident.decode_batch(self.plan("decode", b, b), contexts, slots, n_steps,
                                     [r.blocks.blocks for r in reqs], masks)

    # -- evaluation outside requests ------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        """The next-token logits [vocab] after ``tokens`` and how many of them came from the prefix cache.

        Tokens in cached full blocks are not evaluated again (never the last one: its logits are needed);
        the rest is evaluated in chunks, and its full blocks join the prefix cache."""
        tokens = self._checked(tokens)
        n = len(tokens)
        with self.lock:
            seq = SeqBlocks()
            reused = self.pool.match(seq, tokens, n - 1)
            try:
                self.scheduler.make_room(seq, n)
                start, logits = reused, None
                while start < n:
                    end = min(start + self.prefill_chunk, n)
                    # only the last chunk's logits are read: the earlier ones queue without a round trip;
                    # the chunk's blocks join the prefix cache while the device computes them (the queue
                    # runs any later reader after them)
                    logits = self.forward(Step.single(tokens[start:end], start, seq.blocks), end - start == 1,
                                          read=end >= n, meanwhile=lambda e=end: self.pool.register(seq, tokens, e))
                    start = end
            finally:
                self.pool.release(seq)
        return np.asarray(logits).reshape(-1), reused

    def eval_all(self, tokens: Sequence[int]) -> Iterator[np.ndarray]:
        """Teacher forcing: logits for every position of ``tokens``, one [rows, vocab] block per chunk."""
        tokens = self._checked(tokens)
        n = len(tokens)
        out = []
        with self.lock:
            plan = self.logits_plan
            seq = SeqBlocks()
            try:
                self.scheduler.make_room(seq, n)
                for start in range(0, n, self.prefill_chunk):
                    count = min(self.prefill_chunk, n - start)
                    res = self.backend.run(plan, Step.single(tokens[start:start + count], start, seq.blocks))
                    out.append(res["logits"][:count])
            finally:
                self.pool.release(seq)
        return iter(out)

    def __del__(self) -> None:
        # the GPU-resident loop's generator holds the backend (its buffers) from a live frame: end it, so a
        # dropped model frees its device memory now, not at some later cycle collection
        scheduler = self.__dict__.get("scheduler")
        if scheduler is not None:
            try:
                scheduler._drop_stream()
            except Exception:           # noqa: BLE001  (interpreter shutdown: modules may be half gone)
                pass

    def forget(self) -> None:
        """Empty the prefix cache (blocks no sequence holds go back to the free list): the next evaluation
        of any tokens starts from nothing."""
        with self.lock:
            self.pool.clear_cache()

    def _checked(self, tokens: Sequence[int]) -> np.ndarray:
        """``tokens`` checked (length, ids in the vocabulary) as an int32 array, what the steps take as is."""
        ids = np.asarray(tokens) if isinstance(tokens, (list, np.ndarray)) else None
        if ids is not None and ids.ndim == 1 and ids.dtype.kind in "iu" and 1 <= len(ids) <= self.n_ctx:
            # the common case in one vector pass (a prefill chunk's first submit waits for this)
            # one reduction: negative ids wrap to the top of uint64
            if int(np.maximum.reduce(ids.astype(np.int64, copy=False).view(np.uint64))) >= self.vocab_size:
                self._check_ids(ids.tolist())
            return ids.astype(np.int32)
        tokens = [int(t) for t in tokens]
        if not 1 <= len(tokens) <= self.n_ctx:
            raise ContextLengthError(
                f"{len(tokens)} tokens do not fit in the context of {self.n_ctx}; pass fewer tokens or a larger "
                f"n_ctx (up to {self.hparams.n_ctx_train})")
        self._check_ids(tokens)
        return np.asarray(tokens, np.int32)

    def _check_ids(self, tokens: Sequence[int]) -> None:
        try:                                     # one vector test: a prefill chunk's ids cost microseconds
            ids = np.asarray(tokens, np.int64)
            bad = ids[(ids < 0) | (ids >= self.vocab_size)].tolist()
        except OverflowError:                    # an id beyond 64 bits
            bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidParameterError(f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})")

    # -- requests -------------------------------------------------------------------------------------------
    def request(self, prompt_ids: Sequence[int], params: SamplingParams, after: Request | None = None,
                seed_offset: int = 0, finish: Callable[[GenerationResult], GenerationResult] | None = None
                ) -> Request:
        """A request for ``params.max_tokens`` at most after ``prompt_ids`` (validated here, not submitted; a
        constraint is compiled here, so a bad one fails now). ``seed_offset`` is added to the seed (the i-th of
        n completions); ``after``: admitted once that request's prompt is in the cache, to share its blocks;
        ``finish`` rewrites the result (tool calls)."""
        prompt = [int(t) for t in prompt_ids]
        if not prompt:
            raise InvalidParameterError(
                "the prompt is empty; pass some text (or, for unconditional generation, the token list "
                "[bos_id])")
        if len(prompt) >= self.n_ctx:
            raise ContextLengthError(
                f"the prompt has {len(prompt)} tokens but the context holds {self.n_ctx} (at most "
                f"{self.n_ctx - 1} prompt tokens leave room to generate); shorten the prompt or raise n_ctx "
                f"(this model supports up to {self.hparams.n_ctx_train})")
        self._check_ids(prompt)
        self._check_ids(list(params.logit_bias))
        if sum(b == -np.inf for b in params.logit_bias.values()) >= self.vocab_size:
            raise InvalidParameterError("logit_bias bans every token (-inf for all of them); nothing can be sampled")
        if seed_offset and params.seed is not None:
            params = params.with_overrides(seed=params.seed + seed_offset)
        if self.speculator is not None:
            check_speculative(params)
        constraint = Constraint.from_params(params, self.tokenizer, self.vocab_size)
        sampler = SequenceSampler(params, self.tokenizer, self.n_ctx, constraint)
        text = _TextDecoder(self.tokenizer)
        return Request(prompt, params, sampler, text.feed, text.flush, frozenset(self.tokenizer.eog_ids),
                       after=after, finish=finish)

    def submit(self, req: Request) -> Generation:
        """Queue ``req``; its handle."""
        self.scheduler.submit(req)
        return Generation(self, req)

    def start(self, prompt_ids: Sequence[int], params: SamplingParams,
              finish: Callable[[GenerationResult], GenerationResult] | None = None) -> Generation:
        """A generation of ``params.max_tokens`` at most after ``prompt_ids``, queued now (``finish`` as in
        :meth:`request`)."""
        return self.submit(self.request(prompt_ids, params, finish=finish))

    def run_until_done(self, reqs: Sequence[Request]) -> None:
        """Step until every request in ``reqs`` is done (cancelling them all if a step raises)."""
        try:
            while not all(r.done for r in reqs):
                self.scheduler.step()
        except BaseException:
            for r in reqs:
                self.scheduler.cancel(r)
            self.scheduler.reap()
            raise


class Generation:
    """A request's handle: iterate for text pieces; ``result`` is set once it has finished.

    Text is emitted only when it is whole UTF-8 and cannot be the start of a stop string. Iterating runs
    scheduler steps in this thread when no piece is ready (each step serves every running request).
    ``close()`` cancels the request: it draws no further token and its blocks go back to the pool (at once
    when no step is running, else at the next); ``result`` then stays None. An exception inside a step this
    handle ran (Ctrl-C) cancels it too.
    """

    def __init__(self, engine: Engine, req: Request):
        self._engine = engine
        self.request = req

    @property
    def result(self) -> GenerationResult | None:
        return self.request.result

    @property
    def logprobs(self) -> list | None:
        """The logprobs of the tokens drawn so far (TokenLogprob each), when asked for."""
        return self.request.logprobs

    @property
    def generated(self) -> list[int]:
        return self.request.generated

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> str:
        req, sched = self.request, self._engine.scheduler
        while True:
            while req.pieces:
                text, _ = req.pieces.popleft()
                if text:
                    return text
            if req.done:
                raise StopIteration
            try:
                sched.step()
            except BaseException:
                self.close()
                raise

    def __enter__(self) -> Generation:
        return self

    def __exit__(self, *exc: object) -> None:
        self.close()

    def step(self) -> str:
        """One step (one token, under the engine lock): the text it made safe to emit, possibly "" (held
        back, or a token without text). For callers that interleave generations step by step (oxigpu.aio);
        a no-op once finished or closed."""
        if self._closed or self.result is not None:
            return ""
        with self._engine.lock:
            return self._step()

    def close(self) -> None:
        """Cancel the request (see the class docstring); the engine stays usable."""
        req = self.request
        if req.result is None and not req.cancelled:
            self._engine.scheduler.cancel(req)
            req.pieces.clear()
            self._engine.scheduler.reap()

    def __del__(self) -> None:
        if getattr(self, "request", None) is not None and not self.request.done:
            self.request.cancelled = True      # an abandoned handle's request stops at the next step


class _TextDecoder:
    """Generated tokens -> text that never splits a UTF-8 character; control tokens render as nothing.

    Not ``tokenizer.stream()``: that decodes a whole sequence and drops the leading space of its first
    piece (SentencePiece's add_space_prefix), but generated text continues the prompt, so every piece is
    kept whole, as llama.cpp's per-token ``token_to_piece`` does.
    """

    def __init__(self, tokenizer: Tokenizer):
        self._tokenizer = tokenizer
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")

    def feed(self, token: int) -> str:
        return self._utf8.decode(self._tokenizer.token_to_piece(token, special=False))

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)
