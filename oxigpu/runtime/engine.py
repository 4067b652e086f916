"""The engine: one model on one backend, a KV cache that remembers what it holds, and the generation loop.

Two plans are compiled once per model: a prefill plan for chunks of ``prefill_chunk`` tokens (the last
chunk is padded and masked with ``n_tokens``) and a decode plan for single tokens. A third, returning the
logits of every row, is compiled on first use by teacher-forced evaluation.

The KV cache is backend state. The engine records which tokens its rows hold (``cached_tokens``), so a
new request re-evaluates only what differs from the previous one: a chat turn after a turn, a generation
after a generation on the same prompt, or a stream resuming after another call ran in between.

Thread safety: every step holds ``Engine.lock`` (an RLock), so calls from several threads are serialized
step by step; each generation re-establishes its own context in the cache before its step (cheap when
nothing ran in between: the prefix matches and only the newest token is evaluated).
"""
from __future__ import annotations

import codecs
import threading
import time
from collections import deque
from collections.abc import Callable, Iterator, Sequence
from pathlib import Path
from typing import Literal

import numpy as np

from ..errors import ContextLengthError, InvalidParameterError
from ..gguf import GGUFFile
from ..graph.plan import Plan
from ..graph.plan import compile as compile_plan
from ..models import HParams, build_graph
from ..tokenizer import Tokenizer
from .constraints import Constraint
from .decoding import SequenceSampler
from .params import FinishReason, GenerationResult, SamplingParams, Timings
from .stops import StopMatcher

BACKENDS = ("auto", "wgpu", "numpy")
DEFAULT_N_CTX = 4096
PREFILL_CHUNK = 64

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


def _make_backend(name: str, model, n_ctx: int):
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


class Engine:
    """A loaded model: tokenizer, backend, compiled plans and the bookkeeping of its KV cache."""

    def __init__(self, model_path: str | Path, backend: str = "auto", n_ctx: int | None = None,
                 prefill_chunk: int | None = None, progress: Progress | None = None):
        t0 = time.perf_counter()
        report = progress or (lambda stage, done, total: None)
        stages = 5
        self.backend_name = select_backend(backend)
        report("reading GGUF", 0, stages)
        self.model_path = Path(model_path)
        self.model = GGUFFile(self.model_path)
        self.hparams = HParams.from_gguf(self.model)
        report("building tokenizer", 1, stages)
        self.tokenizer = Tokenizer.from_metadata(self.model.metadata)
        self.n_ctx = resolve_n_ctx(n_ctx, self.hparams.n_ctx_train)
        self.backend = _make_backend(self.backend_name, self.model, self.n_ctx)
        # None: the backend's own default (the chunk that suits its hardware), else PREFILL_CHUNK
        chunk = prefill_chunk or getattr(self.backend, "prefill_chunk", PREFILL_CHUNK)
        self.prefill_chunk = max(1, min(chunk, self.n_ctx))
        report("compiling plans", 2, stages)
        self._prefill = self._plan(self.prefill_chunk, "last")
        self._decode = self._plan(1, "last")
        self._all_logits: Plan | None = None      # compiled on the first teacher-forced evaluation
        report("loading weights", 3, stages)
        self.backend.load(self._prefill)
        report("loading weights", 4, stages)
        self.backend.load(self._decode)
        report("ready", 5, stages)
        self.cached_tokens: list[int] = []     # the tokens whose K/V rows are valid, in order
        self._last_logits: np.ndarray | None = None   # logits after cached_tokens[-1], when known
        self.lock = threading.RLock()
        self.load_s = time.perf_counter() - t0

    def _plan(self, T: int, logits: Literal["last", "all"]) -> Plan:
        return compile_plan(build_graph(self.model, self.hparams, T, self.n_ctx, logits))

    @property
    def vocab_size(self) -> int:
        return self.hparams.n_vocab

    # -- evaluation ---------------------------------------------------------------------------------
    def eval(self, tokens: Sequence[int]) -> tuple[np.ndarray, int]:
        """Make the cache hold `tokens`; return the next-token logits [vocab] and how many were reused.

        Only the part after the longest common prefix with the cache is evaluated (at least the last
        token, unless its logits are already known). The cache bookkeeping is updated chunk by chunk,
        so an interrupt (Ctrl-C) mid-way leaves it consistent.
        """
        n = len(tokens)
        if not 1 <= n <= self.n_ctx:
            raise ContextLengthError(f"{n} tokens do not fit in the context of {self.n_ctx}")
        self._check_ids(tokens)
        reused = _common_prefix(self.cached_tokens, tokens)
        if reused == n == len(self.cached_tokens) and self._last_logits is not None:
            return self._last_logits, reused
        start = min(reused, n - 1)
        del self.cached_tokens[start:]
        self._last_logits = None
        logits = None
        while start < n:
            count = min(self.prefill_chunk, n - start)
            plan = self._decode if count == 1 else self._prefill
            out = self.backend.run(plan, {"tokens": np.asarray(tokens[start:start + count], np.int32)},
                                   pos=start, n_tokens=count)
            self.cached_tokens.extend(tokens[start:start + count])
            start += count
            logits = out["logits"]
        self._last_logits = np.asarray(logits).reshape(-1)
        return self._last_logits, min(reused, n - 1)

    def eval_all(self, tokens: Sequence[int]) -> Iterator[np.ndarray]:
        """Teacher forcing: logits for every position of `tokens`, one [rows, vocab] block per chunk."""
        n = len(tokens)
        if not 1 <= n <= self.n_ctx:
            raise ContextLengthError(
                f"{n} tokens do not fit in the context of {self.n_ctx}; pass fewer tokens or a larger n_ctx "
                f"(up to {self.hparams.n_ctx_train})")
        self._check_ids(tokens)
        if self._all_logits is None:
            self._all_logits = self._plan(self.prefill_chunk, "all")
            self.backend.load(self._all_logits)
        self.cached_tokens.clear()
        self._last_logits = None
        for start in range(0, n, self.prefill_chunk):
            count = min(self.prefill_chunk, n - start)
            out = self.backend.run(self._all_logits, {"tokens": np.asarray(tokens[start:start + count],
                                                                           np.int32)},
                                   pos=start, n_tokens=count)
            self.cached_tokens.extend(tokens[start:start + count])
            yield out["logits"][:count]

    def _check_ids(self, tokens: Sequence[int]) -> None:
        bad = [t for t in tokens if not 0 <= t < self.vocab_size]
        if bad:
            raise InvalidParameterError(f"token id {bad[0]} is outside the vocabulary (size {self.vocab_size})")

    # -- generation ---------------------------------------------------------------------------------
    def start(self, prompt_ids: Sequence[int], params: SamplingParams,
              finish: Callable[[GenerationResult], GenerationResult] | None = None) -> Generation:
        """A generation of `params.max_tokens` at most after `prompt_ids` (validated here, run lazily; a
        constraint is compiled here, so a bad one fails now). ``finish`` rewrites the result (tool calls)."""
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
        constraint = Constraint.from_params(params, self.tokenizer, self.vocab_size)
        return Generation(self, prompt, params, constraint, finish)


class Generation:
    """One generation in progress: iterate for text pieces; `result` is set once it has finished.

    Each step (evaluate, sample, check stops) runs under the engine lock. Text is emitted only when it is
    whole UTF-8 and cannot be the start of a stop string. `close()` ends the generation before its next
    step; `result` then stays None.
    """

    def __init__(self, engine: Engine, prompt: list[int], params: SamplingParams,
                 constraint: Constraint | None = None,
                 finish: Callable[[GenerationResult], GenerationResult] | None = None):
        self._engine = engine
        self._finish = finish
        self._prompt = prompt
        self._params = params
        self._sampler = SequenceSampler(params, engine.tokenizer, engine.n_ctx, constraint)
        self._decoder = _TextDecoder(engine.tokenizer)
        self._stops = StopMatcher(params.stop)
        self._eog = engine.tokenizer.eog_ids
        self.generated: list[int] = []
        self._text: list[str] = []
        self._cached = 0
        self._prompt_s = 0.0
        self._t_prompt_done: float | None = None
        self._closed = False
        self._stream: Iterator | None = None                 # the backend's GPU-resident decode, if any
        self._pending: deque[tuple[int, np.ndarray | None]] = deque()   # (id, logprob row) not consumed yet
        self._forced: deque[int] = deque()                   # tokens a constraint forces next (already taken)
        self.result: GenerationResult | None = None

    def __iter__(self) -> Generation:
        return self

    def __next__(self) -> str:
        while not self._closed and self.result is None:
            with self._engine.lock:
                piece = self._step()
            if piece:
                return piece
        raise StopIteration

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
        """Stop here; the engine stays usable (its cache keeps the tokens evaluated so far)."""
        self._closed = True
        with self._engine.lock:
            self._drop_stream()

    def _step(self) -> str:
        """One token: evaluate, sample, check end conditions; return the text that became safe to emit."""
        reason, piece = self._advance()
        self._text.append(piece)
        if reason is not None:
            result = GenerationResult("".join(self._text), list(self.generated), reason, self._timings(),
                                      self.logprobs)
            self.result = self._finish(result) if self._finish is not None else result
            self._drop_stream()
        return piece

    def _advance(self) -> tuple[FinishReason | None, str]:
        if len(self.generated) >= self._params.max_tokens:
            return "length", self._tail()
        context = self._prompt + self.generated
        if len(context) > self._engine.n_ctx:
            return "length", self._tail()
        token = self._forced.popleft() if self._forced else self._resident_token(context)
        if token is None:
            token = self._device_step(context)
        if token is None:
            t0 = time.perf_counter()
            logits, reused = self._engine.eval(context)
            if self._t_prompt_done is None:
                self._t_prompt_done = time.perf_counter()
                self._prompt_s, self._cached = self._t_prompt_done - t0, reused
            token = self._sampler.draw(logits, context)
            # tokens the constraint forces next are taken without a forward pass each: the next step
            # evaluates them all in one chunk
            self._forced.extend(self._sampler.forced_tokens())
        if token in self._eog:
            self._forced.clear()
            return "stop", self._tail()
        self.generated.append(token)
        text = self._stops.feed(self._decoder.feed(token))
        return ("stop" if self._stops.stopped else None), text

    def _device_step(self, context: list[int]) -> int | None:
        """One token drawn by the GPU sampler for a constrained sequence (the host's mask uploaded with its
        slot; no logits read back), or None where the backend has no device loop or the prompt is not yet
        evaluated. Tokens a constraint forced are evaluated first, in one chunk."""
        eng = self._engine
        start = getattr(eng.backend, "decode_stream", None)
        if start is None or self._sampler.constraint is None or not self.generated:
            return None
        self._drop_stream()
        if eng.cached_tokens != context[:-1]:
            eng.eval(context[:-1])
        ids, rows = next(start(eng._decode, context, self._sampler.slot_batch(context), 1))
        eng.cached_tokens.append(context[-1])
        eng._last_logits = None
        self._sampler.accept_row(ids[0], None if rows is None else rows[0])
        self._forced.extend(self._sampler.forced_tokens())
        return ids[0]

    def _resident_token(self, context: list[int]) -> int | None:
        """The next id from the backend's GPU-resident decode (``decode_stream``), or None: use the host path.

        A stream starts after the first token (the cache then holds all of `context` but its newest token)
        and is sized to the length limit; its batches are consumed one id per step. The step that drew an
        id evaluated ``context[-1]``, so that token joins the cache bookkeeping only when the id is
        consumed: ids drawn past EOS, a stop string or close() are never counted as cached. If anything
        else used the engine in between, the stream is dropped and the host path re-establishes the cache.
        """
        eng = self._engine
        if eng.cached_tokens != context[:-1]:
            self._drop_stream()
            return None
        if self._stream is None and not self._pending:
            start = getattr(eng.backend, "decode_stream", None)
            if start is None or not self.generated or not self._sampler.resident:
                return None
            steps = min(self._params.max_tokens - len(self.generated), eng.n_ctx - len(context) + 1)
            self._stream = start(eng._decode, context, self._sampler.slot_batch(context), steps)
        if not self._pending:
            ids, rows = next(self._stream, ((), None))
            self._pending.extend(zip(ids, rows if rows is not None else [None] * len(ids)))
            if not self._pending:
                self._drop_stream()
                return None
        eng.cached_tokens.append(context[-1])
        eng._last_logits = None
        token, row = self._pending.popleft()
        self._sampler.accept_row(token, row)
        return token

    @property
    def logprobs(self) -> list | None:
        """The logprobs of the tokens drawn so far (TokenLogprob each), when asked for."""
        return None if self._sampler.logprobs is None else self._sampler.logprobs[:len(self.generated)]

    def _drop_stream(self) -> None:
        """Abandon the resident stream: the GPU stops after the batch already queued."""
        if self._stream is not None:
            self._stream.close()
        self._stream = None
        self._pending.clear()

    def _tail(self) -> str:
        """At the end, release what was held back: a partial UTF-8 character, a possible stop start."""
        return self._stops.feed(self._decoder.flush()) + self._stops.flush()

    def _timings(self) -> Timings:
        done = self._t_prompt_done
        return Timings(load_s=self._engine.load_s, prompt_tokens=len(self._prompt), cached_tokens=self._cached,
                       prompt_s=self._prompt_s, generated_tokens=len(self.generated),
                       generation_s=time.perf_counter() - done if done is not None else 0.0)


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


def _common_prefix(a: Sequence[int], b: Sequence[int]) -> int:
    n = min(len(a), len(b))
    i = 0
    while i < n and a[i] == b[i]:
        i += 1
    return i
