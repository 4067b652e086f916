"""The async serving API: ``AsyncLLM`` runs many requests on one model from asyncio code (the HTTP server's
engine).

    llm = AsyncLLM("model.gguf", max_seqs=8)
    result = await llm.generate("The capital of France is", SamplingParams(max_tokens=16, temperature=0))
    async with llm.stream(llm.chat_prompt(messages), params) as events:
        async for event in events:        # StreamEvent: text piece, token ids; the last carries the result
            print(event.text, end="")
    await llm.close()

What a caller can rely on (the batched engine keeps this surface):

* ``stream()`` and ``generate()`` validate the prompt and settings at once (``InvalidParameterError``,
  ``ContextLengthError``) and raise ``QueueFullError`` when ``max_queue`` requests already wait; nothing is
  queued then.
* Every request gets the tokens it would get alone from ``LLM.generate`` with the same prompt and settings.
* Leaving a stream early (``aclose()``, ``async with`` exit, the consuming task cancelled, the iterator
  dropped) cancels its request: it runs no further step, and its KV cache rows are released (``aclose()``
  returns once they are).
* A request that fails (a device error, a bug) raises in its own consumer; the other requests and the
  worker go on.

Requests run on the engine's scheduler (``runtime/scheduler.py``): they are batched with every other running
request, join at any step and leave when done, and are preempted and recomputed (never failed) when the KV
pool runs short. One worker thread runs scheduler steps while any request of this AsyncLLM is live; each
step delivers every request's new tokens to its consumer's event loop (``call_soon_threadsafe``), and
submitting or cancelling never waits for a step.
"""
from __future__ import annotations

import asyncio
import collections
import threading
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import TYPE_CHECKING, Any

from .api import LLM
from .errors import InvalidParameterError, OxigpuError
from .graph.ir import KV_BLOCK as _KV_BLOCK
from .runtime.engine import MAX_SEQS
from .runtime.params import GenerationResult, SamplingParams, TokenLogprob
from .runtime.scheduler import Request

if TYPE_CHECKING:
    from .runtime.engine import Progress
    from .runtime.tools import ChatPlan
    from .tokenizer import Tokenizer

KV_BLOCK = _KV_BLOCK
"""Tokens per KV-cache block: the unit ``stats()`` counts in."""

DEFAULT_MAX_SEQS = 8
DEFAULT_MAX_QUEUE = 64


class QueueFullError(OxigpuError):
    """``max_queue`` requests already wait for a slot; try again later (the server answers 429)."""


class NotEmbeddingModelError(InvalidParameterError):
    """``embed()`` on a model that does not produce embeddings."""


class ClosedError(OxigpuError):
    """The AsyncLLM was closed; requests still running or waiting end with this error."""


@dataclass(frozen=True)
class StreamEvent:
    """What one step of a request produced.

    `text` is the newly safe text (whole UTF-8 characters, never part of a stop string; may be empty while
    text is held back), `token_ids` the tokens sampled since the previous event, `logprobs` their
    ``TokenLogprob``s when the request asked for them (else None). `result` is set on the last event only.
    """

    text: str
    token_ids: tuple[int, ...]
    logprobs: tuple[TokenLogprob, ...] | None = None
    result: GenerationResult | None = None


@dataclass(frozen=True)
class Stats:
    """A snapshot of the scheduler: waiting requests, running sequences and KV-cache blocks in use."""

    queue_depth: int
    running: int
    kv_blocks_used: int
    kv_blocks_total: int


class _Request:
    """One request as the worker sees it: the scheduler's request and, on the submitter's event loop, its
    event queue and the `released` flag (set once the scheduler has dropped it and its KV blocks)."""

    def __init__(self, req: Request, loop: asyncio.AbstractEventLoop):
        self.req = req
        self.loop = loop
        self.events: asyncio.Queue[StreamEvent | BaseException] = asyncio.Queue()
        self.released = asyncio.Event()
        self.sent = 0             # generated tokens already delivered in events
        self.ended = False        # its final event (result or error) was posted, or it was released

    @property
    def cancelled(self) -> bool:
        return self.req.cancelled

    @cancelled.setter
    def cancelled(self, value: bool) -> None:
        self.req.cancelled = value    # read by the scheduler at its next step

    def post(self, item: StreamEvent | BaseException) -> None:
        """Deliver from the stepping thread; a consumer whose loop is gone cancels the request."""
        try:
            self.loop.call_soon_threadsafe(self.events.put_nowait, item)
        except RuntimeError:      # the loop was closed: nobody is listening any more
            self.req.cancelled = True

    def release(self) -> None:
        try:
            self.loop.call_soon_threadsafe(self.released.set)
        except RuntimeError:
            pass

    def on_event(self, req: Request) -> None:
        """The scheduler's callback (stepping thread, after each token and at the end): post what is new."""
        if self.ended:
            return
        if req.cancelled and req.result is None:
            if req.released:              # dropped by the scheduler, its blocks freed
                self.ended = True
                self.release()
            return
        text = "".join(piece for piece, _ in _drain(req.pieces))
        ids = tuple(req.generated[self.sent:])
        lp = req.logprobs
        logprobs = None if lp is None else tuple(lp[self.sent:len(req.generated)])
        self.sent = len(req.generated)
        if req.result is not None:
            self.ended = True             # before the consumer can see the result
        if text or ids or req.result is not None:
            self.post(StreamEvent(text, ids, logprobs, req.result))
        if req.result is not None:
            self.release()


def _drain(pieces: collections.deque) -> list:
    out = []
    while pieces:
        out.append(pieces.popleft())
    return out


class RequestStream:
    """The async iterator ``AsyncLLM.stream`` returns: StreamEvents until the one carrying the result.

    ``aclose()`` (or leaving ``async with``) cancels the request and waits until its KV rows are released;
    a cancelled consuming task or a dropped iterator cancels it too.
    """

    def __init__(self, owner: AsyncLLM, request: _Request):
        self._owner = owner
        self._request = request
        self._done = False

    def __aiter__(self) -> RequestStream:
        return self

    async def __anext__(self) -> StreamEvent:
        if self._done:
            raise StopAsyncIteration
        try:
            item = await self._request.events.get()
        except BaseException:     # the consumer was cancelled (client gone, timeout): so is the request
            self.cancel()
            raise
        if isinstance(item, BaseException):
            self._done = True
            raise item
        if item.result is not None:
            self._done = True
        return item

    async def __aenter__(self) -> RequestStream:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.aclose()

    async def aclose(self) -> None:
        """Cancel the request (unless it has finished) and wait until the worker has released it."""
        self.cancel()
        await self._request.released.wait()

    def cancel(self) -> None:
        """Cancel the request without waiting (for cleanup code that must not await); no-op once finished."""
        self._done = True
        self._owner._cancel(self._request)

    def __del__(self) -> None:
        # No lock here (a finalizer may run on any thread, inside any lock): the worker purges it.
        self._request.cancelled = True


class AsyncLLM:
    """One model serving concurrent requests from asyncio code; see the module docstring.

    Args:
        model_path: a .gguf file; None loads the default model.
        backend: "auto", "wgpu" or "numpy" (as for LLM).
        n_ctx: context window per sequence in tokens (default 4096, never above the model's training context).
        max_seqs: requests generating at once; more wait in the queue.
        kv_memory: bytes for the KV-cache pool shared by the sequences (the batched engine sizes its pool
            with it; the single-sequence engine holds one context of n_ctx rows and only validates it).
        max_queue: requests waiting for a slot before ``QueueFullError``.
        seed: default seed for requests that give none (None: a fresh seed per request).
        progress: called as (stage, done, total) while loading.
        cache_type_k, cache_type_v: the KV cache's types (f16, q8_0, q4_0; ``LLM``'s).
        warmup: compile every batch size's plan and the greedy and default samplers before returning (as a
            server does before it listens), instead of when a batch first grows to that size.
    """

    def __init__(self, model_path: str | Path | None = None, backend: str = "auto", n_ctx: int | None = None,
                 max_seqs: int = DEFAULT_MAX_SEQS, kv_memory: int | None = None,
                 max_queue: int = DEFAULT_MAX_QUEUE, seed: int | None = None, progress: Progress | None = None,
                 cache_type_k: str = "f16", cache_type_v: str = "f16", warmup: bool = False):
        for name, value, low in (("max_seqs", max_seqs, 1), ("max_queue", max_queue, 0)):
            if isinstance(value, bool) or not isinstance(value, int) or value < low:
                raise InvalidParameterError(f"{name} must be an integer >= {low}, got {value!r}")
        if kv_memory is not None and (isinstance(kv_memory, bool) or not isinstance(kv_memory, int)
                                      or kv_memory <= 0):
            raise InvalidParameterError(f"kv_memory must be a positive number of bytes, got {kv_memory!r}")
        self._llm = LLM(model_path, backend=backend, n_ctx=n_ctx, seed=seed, progress=progress,
                        max_seqs=min(max_seqs, MAX_SEQS), kv_memory=kv_memory, cache_type_k=cache_type_k,
                        cache_type_v=cache_type_v)
        self._engine = self._llm.engine
        if warmup and not self._llm.is_embedding_model:
            # every batch size's plan and the greedy and default samplers now, not in the middle of a batch
            for params in (SamplingParams(temperature=0.0), SamplingParams(temperature=1.0, top_p=1.0, top_k=0,
                                                                           min_p=0.0)):
                self._engine.prepare(params, progress)
        self.max_seqs, self.max_queue, self.kv_memory = max_seqs, max_queue, kv_memory
        self._cv = threading.Condition()
        self._live: list[_Request] = []
        self._closed = False
        self._worker = threading.Thread(target=self._run, name="oxigpu-aio", daemon=True)
        if not self._llm.is_embedding_model:      # an embedding model has no scheduler: embed() only
            self._worker.start()

    # -- facts ----------------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self._llm.tokenizer

    @property
    def n_ctx(self) -> int:
        return self._llm.n_ctx

    @property
    def model_path(self) -> Path:
        return self._llm.model_path

    @property
    def arch(self) -> str:
        return self._llm.arch

    @property
    def backend(self) -> str:
        return self._llm.backend

    def chat_prompt(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                    tool_choice: Any = None) -> list[int]:
        """The prompt tokens for `messages` (and tool definitions) through the model's chat template."""
        return self._llm.chat_prompt(messages, tools, tool_choice)

    def chat_plan(self, messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None = None,
                  tool_choice: Any = None) -> ChatPlan:
        """How a chat with `tools` runs (``runtime.tools.ChatPlan``): the constraint its reply is generated under
        (SamplingParams overrides) and ``finish``, which reads the tool calls out of the result."""
        return self._llm.chat_plan(messages, tools, tool_choice)

    def stats(self) -> Stats:
        if self._llm.is_embedding_model:
            return Stats(0, 0, 0, 0)
        st = self._engine.scheduler.stats()
        return Stats(st["waiting"], st["running"], st["kv_blocks_used"], st["kv_blocks_total"])

    # -- requests -------------------------------------------------------------------------------------
    def stream(self, prompt: str | Sequence[int], params: SamplingParams | None = None) -> RequestStream:
        """Queue a request; iterate the returned stream for its events (see StreamEvent).

        Must be called from a running event loop. Raises InvalidParameterError / ContextLengthError for a bad
        prompt or settings, QueueFullError when the queue is full, ClosedError after close().
        """
        loop = asyncio.get_running_loop()
        ids = self._prompt_ids(prompt)
        req = self._engine.request(ids, self._llm.sampling_params(params))
        request = _Request(req, loop)
        req.on_event = request.on_event
        with self._cv:
            if self._closed:
                raise ClosedError("this AsyncLLM is closed")
            self._live = [r for r in self._live if not r.ended]
            if len(self._live) >= self._engine.max_seqs + self.max_queue:
                raise QueueFullError(f"the request queue is full ({self.max_queue} waiting for "
                                     f"{self._engine.max_seqs} running); try again later")
            self._live.append(request)
            self._engine.scheduler.submit(req)
            self._cv.notify()
        return RequestStream(self, request)

    async def generate(self, prompt: str | Sequence[int], params: SamplingParams | None = None
                       ) -> GenerationResult:
        """The whole result of one request (cancelling the awaiting task cancels the request)."""
        stream = self.stream(prompt, params)
        try:
            async for event in stream:
                if event.result is not None:
                    return event.result
        finally:
            stream.cancel()
        raise OxigpuError("the request ended without a result")   # unreachable: the last event has one

    async def embed(self, inputs: Sequence[str | Sequence[int]]) -> list[Any]:
        """One embedding vector per input (text or token ids), for embedding models (``LLM.embed``).

        Raises NotEmbeddingModelError when the model does not produce embeddings.
        """
        embed = getattr(self._llm, "embed", None)
        if embed is None or not getattr(self._llm, "is_embedding_model", False):
            raise NotEmbeddingModelError("the model is not an embedding model (this engine has no embeddings)")
        return list(await asyncio.to_thread(embed, list(inputs)))

    async def close(self) -> None:
        """Stop the worker; requests still waiting or running end with ClosedError."""
        with self._cv:
            self._closed = True
            self._cv.notify()
        if self._worker.is_alive():
            await asyncio.to_thread(self._worker.join)

    async def __aenter__(self) -> AsyncLLM:
        return self

    async def __aexit__(self, *exc: object) -> None:
        await self.close()

    # -- internals ------------------------------------------------------------------------------------
    def _prompt_ids(self, prompt: str | Sequence[int]) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidParameterError("the prompt is empty")
            return self._llm.tokenize(prompt)
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise InvalidParameterError("a prompt must be a string or a sequence of token ids, not bytes")
        try:
            return list(prompt)
        except TypeError:
            raise InvalidParameterError(f"a prompt must be a string or a sequence of token ids, got "
                                        f"{type(prompt).__name__}") from None

    def _cancel(self, request: _Request) -> None:
        """From the consumer's loop: the request draws no further token; the worker's next step releases it
        and its KV blocks (then ``released`` is set)."""
        with self._cv:
            self._engine.scheduler.cancel(request.req)
            self._cv.notify()

    def _run(self) -> None:
        """The worker: run scheduler steps while a request of this AsyncLLM is live."""
        sched = self._engine.scheduler
        while True:
            with self._cv:
                self._live = [r for r in self._live if not r.ended]
                if self._closed:
                    for r in self._live:
                        r.post(ClosedError("this AsyncLLM was closed"))
                        sched.cancel(r.req)
                    sched.reap()
                    for r in self._live:
                        r.ended = True
                        r.release()
                    return
                if not self._live:
                    self._cv.wait()
                    continue
            try:
                if not sched.step():
                    with self._cv:            # live requests wait on something else (another's prompt)
                        self._cv.wait(0.005)
            except Exception as e:            # the step's requests fail; the model and the worker go on
                with self._cv:
                    failed = [r for r in self._live if not r.ended and not r.req.done]
                for r in failed:
                    r.post(e)
                    r.ended = True
                    sched.cancel(r.req)
                sched.reap()
                for r in failed:
                    r.release()
