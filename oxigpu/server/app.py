"""The OpenAI-compatible HTTP app: FastAPI routes over one ``AsyncLLM``.

Routes: ``/v1/models``, ``/v1/chat/completions``, ``/v1/completions``, ``/v1/embeddings``, ``/health``,
``/metrics``, ``/tokenize`` and ``/detokenize`` (llama-server's). Every answer that is not a success is
OpenAI's error object, ``{"error": {"message", "type", "param", "code"}}``.

Limits, each answered before any work is done for the request: the API key (every route but /health; the
header compared in constant time), the body size (checked against Content-Length, then counted while the
body streams in, never buffered past the limit), the queue (429 with Retry-After when the engine's queue is
full), the context (max_tokens capped by what is left of it) and a per-request timeout. A client that goes
away has its requests cancelled at once (streaming: the response task is cancelled; otherwise a watcher on
the connection), which frees their KV cache at the engine's next step. An exception inside one request is
that request's 4xx/5xx; the app and the engine go on.
"""
from __future__ import annotations

import asyncio
import hmac
import logging
import math
import re
import secrets
import threading
import time
from collections.abc import AsyncIterator, Callable, Sequence
from contextlib import asynccontextmanager
from dataclasses import dataclass
from typing import Any

from fastapi import FastAPI, Request
from fastapi.responses import JSONResponse, Response, StreamingResponse
from pydantic import BaseModel, ValidationError
from starlette.exceptions import HTTPException as StarletteHTTPException
from starlette.requests import ClientDisconnect

from .._version import __version__
from ..aio import AsyncLLM, ClosedError, NotEmbeddingModelError, QueueFullError, RequestStream, StreamEvent
from ..errors import ContextLengthError, InvalidParameterError, OxigpuError, TemplateError, TokenizerError
from ..runtime.params import GenerationResult, SamplingParams, TokenLogprob
from ..runtime.tools import ChatPlan, ToolCallDelta, ToolCallStream
from . import protocol as P
from .metrics import CONTENT_TYPE, Metrics

log = logging.getLogger("oxigpu.server")

DEFAULT_MAX_BODY = 4 << 20          # bytes; a full 128k-token prompt as JSON token ids fits
DEFAULT_TIMEOUT = 600.0             # seconds per request
COMPLETIONS_DEFAULT_MAX_TOKENS = 16  # OpenAI's default for /v1/completions; chat runs to the context's end
ROUTES = ("/v1/models", "/v1/chat/completions", "/v1/completions", "/v1/embeddings", "/health", "/metrics",
          "/tokenize", "/detokenize")


@dataclass(frozen=True)
class ServerConfig:
    """What the app enforces. api_key None: no authentication (the server binds loopback unless told)."""

    api_key: str | None = None
    max_body: int = DEFAULT_MAX_BODY
    request_timeout: float = DEFAULT_TIMEOUT


class ApiError(Exception):
    """An answer in OpenAI's error format."""

    def __init__(self, status: int, message: str, type: str = "invalid_request_error", param: str | None = None,
                 code: str | None = None, headers: dict[str, str] | None = None):
        super().__init__(message)
        self.status, self.message, self.type, self.param, self.code = status, message, type, param, code
        self.headers = headers

    def response(self) -> JSONResponse:
        body = P.ErrorResponse(error=P.ErrorBody(message=self.message, type=self.type, param=self.param,
                                                 code=self.code))
        return JSONResponse(body.model_dump(), status_code=self.status, headers=self.headers)


class ServerState:
    """The model behind the app: loading, then ok (or error, with the reason)."""

    def __init__(self, loader: Callable[[], AsyncLLM], on_loaded: Callable[[ServerState], None] | None = None):
        self.status = "loading"
        self.error: str | None = None
        self.llm: AsyncLLM | None = None
        self.model_id = "oxigpu"
        self.created = int(time.time())
        self._loader, self._on_loaded = loader, on_loaded
        self._thread: threading.Thread | None = None

    def start(self) -> None:
        """Load in a thread, so the server answers /health ("loading") while the weights come in."""
        self._thread = threading.Thread(target=self._load, name="oxigpu-load", daemon=True)
        self._thread.start()

    def _load(self) -> None:
        try:
            llm = self._loader()
        except BaseException as e:     # reported on /health and to the CLI, which exits
            self.error = str(e) if isinstance(e, OxigpuError) else f"{type(e).__name__}: {e}"
            self.status = "error"
            log.error("loading the model failed: %s", self.error)
        else:
            self.llm, self.model_id, self.status = llm, llm.model_path.stem, "ok"
        if self._on_loaded is not None:
            self._on_loaded(self)

    def wait_loaded(self, timeout: float | None = None) -> None:
        if self._thread is not None:
            self._thread.join(timeout)

    def ready(self) -> AsyncLLM:
        if self.llm is not None:
            return self.llm
        if self.status == "error":
            raise ApiError(500, f"the model failed to load: {self.error}", "server_error", code="model_load_failed")
        raise ApiError(503, "the model is loading; try again shortly", "server_error", code="model_loading",
                       headers={"Retry-After": "1"})

    async def close(self) -> None:
        """Close the model if it loaded (a load still running is not waited for: its thread is a daemon)."""
        if self.llm is not None:
            await self.llm.close()


def create_app(loader: Callable[[], AsyncLLM], config: ServerConfig | None = None,
               on_loaded: Callable[[ServerState], None] | None = None) -> FastAPI:
    """The app for the model `loader` returns (it runs in a thread when the app starts)."""
    config = config or ServerConfig()
    state = ServerState(loader, on_loaded)
    metrics = Metrics(lambda: state.llm.stats() if state.llm is not None else None)

    @asynccontextmanager
    async def lifespan(app: FastAPI) -> AsyncIterator[None]:
        state.start()
        yield
        await state.close()

    app = FastAPI(title="oxigpu", version=__version__, lifespan=lifespan, docs_url=None, redoc_url=None,
                  openapi_url=None)
    app.state.server = state
    app.add_middleware(_Guard, api_key=config.api_key, metrics=metrics)
    fingerprint = f"oxigpu-{__version__}"

    @app.exception_handler(ApiError)
    async def _api_error(request: Request, e: ApiError) -> JSONResponse:
        return e.response()

    @app.exception_handler(StarletteHTTPException)
    async def _http_error(request: Request, e: StarletteHTTPException) -> JSONResponse:
        return ApiError(e.status_code, str(e.detail), "invalid_request_error" if e.status_code < 500
                        else "server_error").response()

    @app.exception_handler(Exception)
    async def _unexpected(request: Request, e: Exception) -> JSONResponse:
        return _as_api_error(e).response()

    async def read(request: Request, model: type[BaseModel]) -> Any:
        """The body parsed into `model`; 413 past the size limit without reading on, 400 when invalid."""
        limit = config.max_body
        declared = request.headers.get("content-length")
        if declared is not None and declared.isdigit() and int(declared) > limit:
            raise _too_large(limit)
        chunks, size = [], 0
        try:
            async for chunk in request.stream():
                size += len(chunk)
                if size > limit:
                    raise _too_large(limit)
                chunks.append(chunk)
        except ClientDisconnect:      # gone before its body arrived: nobody to answer
            raise ApiError(400, "the client disconnected while sending the body") from None
        try:
            return model.model_validate_json(b"".join(chunks))
        except ValidationError as e:
            raise _validation_error(e) from None

    # -- informational routes -----------------------------------------------------------------------
    @app.get("/health")
    async def health() -> JSONResponse:
        if state.status == "ok":
            return JSONResponse({"status": "ok"})
        if state.status == "loading":
            return JSONResponse({"status": "loading"}, status_code=503)
        return JSONResponse({"status": "error", "error": state.error}, status_code=500)

    @app.get("/metrics")
    async def prometheus() -> Response:
        return Response(metrics.render(), media_type=CONTENT_TYPE)

    @app.get("/v1/models")
    async def models() -> JSONResponse:
        state.ready()
        card = P.ModelCard(id=state.model_id, created=state.created)
        return JSONResponse(P.ModelList(data=[card]).model_dump())

    @app.get("/v1/models/{model_id:path}")
    async def model(model_id: str) -> JSONResponse:
        state.ready()
        if model_id != state.model_id:
            raise ApiError(404, f"the model '{model_id}' does not exist; this server serves "
                                f"'{state.model_id}'", param="model", code="model_not_found")
        return JSONResponse(P.ModelCard(id=state.model_id, created=state.created).model_dump())

    @app.post("/tokenize")
    async def tokenize(request: Request) -> JSONResponse:
        req: P.TokenizeRequest = await read(request, P.TokenizeRequest)
        tok = state.ready().tokenizer
        try:
            ids = tok.encode(req.content, add_special=req.add_special, parse_special=req.parse_special)
        except OxigpuError as e:
            raise ApiError(400, str(e), param="content") from None
        if not req.with_pieces:
            return JSONResponse({"tokens": ids})
        pieces = []
        for i in ids:
            raw = tok.token_to_piece(i)
            try:
                piece: str | list[int] = raw.decode("utf-8")
            except UnicodeDecodeError:    # part of a character: its bytes, as llama-server gives them
                piece = list(raw)
            pieces.append({"id": i, "piece": piece})
        return JSONResponse({"tokens": pieces})

    @app.post("/detokenize")
    async def detokenize(request: Request) -> JSONResponse:
        req: P.DetokenizeRequest = await read(request, P.DetokenizeRequest)
        tok = state.ready().tokenizer
        _check_ids(req.tokens, tok.vocab_size, "tokens")
        return JSONResponse({"content": tok.decode(req.tokens)})

    @app.post("/v1/embeddings")
    async def embeddings(request: Request) -> JSONResponse:
        req: P.EmbeddingRequest = await read(request, P.EmbeddingRequest)
        llm = state.ready()
        inputs = req.inputs()
        if not inputs or any(not x for x in inputs):
            raise ApiError(400, "input must not be empty", param="input")
        for x in inputs:
            if not isinstance(x, str):
                _check_ids(x, llm.tokenizer.vocab_size, "input")
        if req.dimensions is not None:
            raise ApiError(400, "dimensions is not supported: the embeddings have the model's size",
                           param="dimensions")
        try:
            vectors = await llm.embed(inputs)
        except NotEmbeddingModelError as e:
            raise ApiError(400, str(e), param="model", code="model_not_embedding") from None
        except (InvalidParameterError, ContextLengthError, TokenizerError) as e:
            raise ApiError(400, str(e), param="input") from None
        n_tokens = sum(len(llm.tokenizer.encode(x)) if isinstance(x, str) else len(x) for x in inputs)
        data = [P.Embedding(index=i, embedding=_encode_vector(v, req.encoding_format))
                for i, v in enumerate(vectors)]
        body = P.EmbeddingList(data=data, model=state.model_id,
                               usage=P.Usage(prompt_tokens=n_tokens, completion_tokens=0, total_tokens=n_tokens))
        return JSONResponse(body.model_dump(exclude={"usage": {"completion_tokens"}}))

    # -- generation ----------------------------------------------------------------------------------
    @app.post("/v1/chat/completions")
    async def chat_completions(request: Request) -> Response:
        t0 = time.perf_counter()
        req: P.ChatCompletionRequest = await read(request, P.ChatCompletionRequest)
        llm = state.ready()
        _refuse_unsupported(req.unsupported())
        messages = [_template_message(m) for m in req.messages]
        tools, tool_choice = req.tools, req.tool_choice
        try:
            plan = llm.chat_plan(messages, tools, tool_choice)
            prompt = await _off_loop(sum(len(m["content"] or "") for m in messages), llm.chat_prompt, messages,
                                     tools, tool_choice)
        except (TemplateError, InvalidParameterError, TokenizerError) as e:
            text = str(e)
            param = "tool_choice" if "tool_choice" in text else "tools" if "tool" in text else "messages"
            raise ApiError(400, text, param=param) from None
        max_tokens = req.max_completion_tokens if req.max_completion_tokens is not None else req.max_tokens
        overrides = {"logprobs": bool(req.logprobs), "top_logprobs": req.top_logprobs or 0}
        job = _Job(llm, req, [prompt], max_tokens, None, "messages", t0, metrics, config, overrides, plan)
        if req.stream:
            return _sse(job.stream_chat(state.model_id, fingerprint))
        results = await job.run(request)
        if results is None:
            return Response(status_code=499)
        choices = [P.ChatChoice(index=k, message=_assistant(r), logprobs=_chat_logprobs(r.logprobs),
                                finish_reason=r.finish_reason) for k, r in enumerate(results)]
        body = P.ChatCompletion(id=_id("chatcmpl"), created=int(time.time()), model=state.model_id,
                                system_fingerprint=fingerprint, choices=choices, usage=job.usage(results))
        return JSONResponse(body.model_dump())

    @app.post("/v1/completions")
    async def completions(request: Request) -> Response:
        t0 = time.perf_counter()
        req: P.CompletionRequest = await read(request, P.CompletionRequest)
        llm = state.ready()
        _refuse_unsupported(req.unsupported())
        prompts: list[list[int]] = []
        texts: list[str] = []
        for p in req.prompts():
            if isinstance(p, str):
                if not p:
                    raise ApiError(400, "the prompt is empty", param="prompt")
                try:
                    prompts.append(await _off_loop(len(p), llm.tokenizer.encode, p))
                except OxigpuError as e:
                    raise ApiError(400, str(e), param="prompt") from None
                texts.append(p)
            else:
                if not p:
                    raise ApiError(400, "a token-id prompt must not be empty", param="prompt")
                _check_ids(p, llm.tokenizer.vocab_size, "prompt")
                prompts.append(list(p))
                texts.append(llm.tokenizer.decode(p))
        if not prompts:
            raise ApiError(400, "the prompt list is empty", param="prompt")
        max_tokens = req.max_tokens if req.max_tokens is not None else COMPLETIONS_DEFAULT_MAX_TOKENS
        echo = texts if req.echo else None
        overrides = {"logprobs": req.logprobs is not None, "top_logprobs": req.logprobs or 0}
        job = _Job(llm, req, prompts, max_tokens, echo, "prompt", t0, metrics, config, overrides)
        if req.stream:
            return _sse(job.stream_completion(state.model_id, fingerprint))
        results = await job.run(request)
        if results is None:
            return Response(status_code=499)
        choices = [P.CompletionChoice(index=k, text=job.prefix(k) + r.text, finish_reason=r.finish_reason,
                                      logprobs=job._completion_logprobs(r.logprobs, len(job.prefix(k))))
                   for k, r in enumerate(results)]
        body = P.Completion(id=_id("cmpl"), created=int(time.time()), model=state.model_id,
                            system_fingerprint=fingerprint, choices=choices, usage=job.usage(results))
        return JSONResponse(body.model_dump())

    return app


class _Job:
    """One generation request: its prompts times n choices, submitted together, answered together."""

    def __init__(self, llm: AsyncLLM, req: P._Sampling, prompts: list[list[int]], max_tokens: int | None,
                 echo: list[str] | None, prompt_param: str, t0: float, metrics: Metrics, config: ServerConfig,
                 overrides: dict[str, Any] | None = None, plan: ChatPlan | None = None):
        self.llm, self.req, self.prompts, self.echo, self.plan = llm, req, prompts, echo, plan
        self.metrics, self.t0 = metrics, t0
        self.deadline = t0 + config.request_timeout
        self.timeout = config.request_timeout
        self.n = req.n or 1
        self.include_usage = bool(req.stream_options and req.stream_options.include_usage)
        self.continuous_usage = bool(req.stream_options and req.stream_options.continuous_usage_stats)
        self.generated = 0          # tokens streamed so far, all choices (continuous_usage_stats)
        # with tools the reply's text holds the calls' markup: streams send it parsed (ToolCallStream)
        self.buffered = plan is not None and plan.format != "none"
        vocab = llm.tokenizer.vocab_size
        bias = {int(k): v for k, v in (req.logit_bias or {}).items()}
        _check_ids(bias, vocab, "logit_bias")
        if req.ignore_eos:
            bias.update((t, -math.inf) for t in llm.tokenizer.eog_ids)
        try:
            constraint = req.constraint()
        except P.ParamError as e:
            raise ApiError(400, str(e), param=e.param) from None
        if plan is not None and plan.constraint:
            if constraint:
                raise ApiError(400, "a response_format or grammar cannot be combined with this tool_choice: the "
                                    "tool calls are constrained already", param="response_format")
            constraint = dict(plan.constraint)
        constraint_param = ("tools" if plan is not None and plan.constraint else
                            "grammar" if "grammar" in constraint else "response_format" if constraint else None)
        seed = None if req.seed is None else req.seed % 2**64
        try:
            template = SamplingParams(
                max_tokens=1, stop=req.stop_list(), logit_bias=bias,
                temperature=1.0 if req.temperature is None else req.temperature,
                top_p=1.0 if req.top_p is None else req.top_p,
                top_k=req.top_k if req.top_k is not None and req.top_k > 0 else 0,
                min_p=req.min_p or 0.0, repeat_penalty=req.repeat_penalty or 1.0,
                repeat_last_n=64 if req.repeat_last_n is None else req.repeat_last_n,
                presence_penalty=req.presence_penalty or 0.0, frequency_penalty=req.frequency_penalty or 0.0,
                **req.extensions(), **(overrides or {}), **constraint)
        except InvalidParameterError as e:
            raise ApiError(400, str(e), param=_named_param(str(e), req)) from None
        self.params: list[SamplingParams] = []
        for p in prompts:
            room = llm.n_ctx - len(p)
            if room < 1:
                raise ApiError(400, f"the {prompt_param} take {len(p)} tokens but the context holds "
                                    f"{llm.n_ctx}; at most {llm.n_ctx - 1} leave room to generate",
                               param=prompt_param, code="context_length_exceeded")
            limit = room if max_tokens is None else min(max_tokens, room)
            for i in range(self.n):
                self.params.append(template.with_overrides(
                    max_tokens=limit, seed=None if seed is None else (seed + i) % 2**64))
        self.streams: list[RequestStream] = []
        try:
            for k, params in enumerate(self.params):
                self.streams.append(llm.stream(self.prompts[k // self.n], params))
        except BaseException as e:
            self.cancel()
            # prompts, ids and biases are checked above: what the engine refuses now is the constraint
            raise _as_api_error(e, constraint_param or prompt_param) from None
        metrics.prompt_tokens.inc(sum(len(p) for p in prompts))
        self._last: dict[int, float] = {}

    def finish(self, result: GenerationResult) -> GenerationResult:
        """The result with its tool calls parsed out of the text (chats with tools)."""
        return self.plan.finish(result) if self.plan is not None else result

    def prefix(self, k: int) -> str:
        return self.echo[k // self.n] if self.echo else ""

    def usage(self, results: Sequence[GenerationResult] | None = None) -> P.Usage:
        """The prompt and the completions' tokens: of ``results``, else those streamed so far."""
        prompt = sum(len(p) for p in self.prompts)
        completion = self.generated if results is None else sum(len(r.token_ids) for r in results)
        return P.Usage(prompt_tokens=prompt, completion_tokens=completion, total_tokens=prompt + completion)

    def usage_so_far(self) -> P.Usage | None:
        """With ``continuous_usage_stats`` (vLLM's stream option), the usage of every chunk: the tokens
        streamed up to it (a client counts exact tokens per chunk from it)."""
        return self.usage() if self.continuous_usage else None

    def cancel(self) -> None:
        for s in self.streams:
            s.cancel()

    def _completion_logprobs(self, lps: Sequence[TokenLogprob] | None, offset: int) -> P.CompletionLogprobs | None:
        """The legacy format: text_offset counts characters from the start of the choice's text."""
        if not lps:
            return None
        offsets = []
        for t in lps:
            offsets.append(offset)
            offset += len(t.token)
        top = [{a.token: _lp(a.logprob) for a in t.top_logprobs} for t in lps] if self.req.logprobs else None
        return P.CompletionLogprobs(tokens=[t.token for t in lps], token_logprobs=[_lp(t.logprob) for t in lps],
                                    top_logprobs=top, text_offset=offsets)

    def _account(self, k: int, event: StreamEvent) -> None:
        """Token counters and the latency histograms (TTFT from the request's arrival)."""
        n = len(event.token_ids)
        if not n:
            return
        self.generated += n
        now = time.perf_counter()
        self.metrics.generated_tokens.inc(n)
        last = self._last.get(k)
        if last is None:            # tokens that come together after the first are 0 s apart
            self.metrics.ttft.observe(now - self.t0)
            n, gap = n - 1, 0.0
        else:
            gap = (now - last) / n
        for _ in range(n):
            self.metrics.itl.observe(gap)
        self._last[k] = now

    async def run(self, request: Request) -> list[GenerationResult] | None:
        """Every choice's result; None when the client went away (everything cancelled)."""
        async def consume(k: int, stream: RequestStream) -> GenerationResult:
            async for event in stream:
                self._account(k, event)
                if event.result is not None:
                    return event.result
            raise OxigpuError("the request ended without a result")

        work = asyncio.ensure_future(asyncio.gather(*(consume(k, s) for k, s in enumerate(self.streams))))
        work.add_done_callback(_retrieve)     # cancelled when the client goes: nothing to report then
        gone = asyncio.ensure_future(_disconnected(request))
        try:
            done, _ = await asyncio.wait({work, gone}, timeout=max(0.0, self.deadline - time.perf_counter()),
                                         return_when=asyncio.FIRST_COMPLETED)
            if work in done:
                try:
                    return [self.finish(r) for r in work.result()]
                except BaseException as e:
                    raise _as_api_error(e) from None
            if gone in done:
                return None
            raise _timeout(self.timeout)
        finally:
            gone.cancel()
            work.cancel()
            self.cancel()

    async def events(self) -> AsyncIterator[tuple[int, StreamEvent]]:
        """(choice, event) from every stream as they come, until each has its result or the deadline."""
        queue: asyncio.Queue[tuple[int, StreamEvent | BaseException]] = asyncio.Queue()

        async def pump(k: int, stream: RequestStream) -> None:
            try:
                async for event in stream:
                    queue.put_nowait((k, event))
            except BaseException as e:
                queue.put_nowait((k, e))

        tasks = [asyncio.ensure_future(pump(k, s)) for k, s in enumerate(self.streams)]
        try:
            left = len(self.streams)
            while left:
                remaining = self.deadline - time.perf_counter()
                if remaining <= 0:
                    raise _timeout(self.timeout)
                try:
                    k, item = await asyncio.wait_for(queue.get(), remaining)
                except TimeoutError:
                    raise _timeout(self.timeout) from None
                if isinstance(item, BaseException):
                    raise _as_api_error(item)
                self._account(k, item)
                if item.result is not None:
                    left -= 1
                yield k, item
        finally:
            for t in tasks:
                t.cancel()
            self.cancel()

    async def stream_chat(self, model: str, fingerprint: str) -> AsyncIterator[str]:
        cid, created = _id("chatcmpl"), int(time.time())
        usage_null = None if self.include_usage or self.continuous_usage else {"usage"}

        def chunk(choices: list[P.ChatChunkChoice], usage: P.Usage | None = None) -> str:
            c = P.ChatCompletionChunk(id=cid, created=created, model=model, system_fingerprint=fingerprint,
                                      choices=choices, usage=usage or self.usage_so_far())
            return _data(c.model_dump_json(exclude=usage_null))

        results: dict[int, GenerationResult] = {}
        held: dict[int, list[TokenLogprob]] = {}     # logprobs of a tools reply, sent at its end
        calls = {k: ToolCallStream(self.plan.format) for k in range(len(self.streams))} if self.buffered else {}

        def deltas(ds: list[ToolCallDelta]) -> list[P.ToolCallDelta] | None:
            return [P.ToolCallDelta(index=d.index, id=d.id, type="function" if d.id else None,
                                    function=P.FunctionCallDelta(name=d.name, arguments=d.arguments))
                    for d in ds] or None

        async with _sse_errors(self):
            for k in range(len(self.streams)):
                yield chunk([P.ChatChunkChoice(index=k, delta=P.Delta(role="assistant", content=""))])
            async for k, event in self.events():
                if self.buffered:       # the calls' markup is parsed as it comes: content and call deltas
                    held.setdefault(k, []).extend(event.logprobs or ())
                    text, ds = calls[k].feed(event.text) if event.text else ("", [])
                    if text or ds:
                        yield chunk([P.ChatChunkChoice(index=k, delta=P.Delta(content=text or None,
                                                                              tool_calls=deltas(ds)))])
                elif event.text or event.logprobs:
                    yield chunk([P.ChatChunkChoice(index=k, delta=P.Delta(content=event.text or None),
                                                   logprobs=_chat_logprobs(event.logprobs))])
                if event.result is None:
                    continue
                r = results[k] = self.finish(event.result)
                if self.buffered:
                    text, ds = calls[k].finish(r)
                    if text or ds or held.get(k):
                        yield chunk([P.ChatChunkChoice(index=k, delta=P.Delta(content=text or None,
                                                                              tool_calls=deltas(ds)),
                                                       logprobs=_chat_logprobs(held.get(k)))])
                yield chunk([P.ChatChunkChoice(index=k, delta=P.Delta(), finish_reason=r.finish_reason)])
            if self.include_usage:
                yield chunk([], self.usage(list(results.values())))
            yield _DONE

    async def stream_completion(self, model: str, fingerprint: str) -> AsyncIterator[str]:
        cid, created = _id("cmpl"), int(time.time())
        usage_null = None if self.include_usage or self.continuous_usage else {"usage"}

        def chunk(choices: list[P.CompletionChoice], usage: P.Usage | None = None) -> str:
            c = P.Completion(id=cid, created=created, model=model, system_fingerprint=fingerprint,
                             choices=choices, usage=usage or self.usage_so_far())
            return _data(c.model_dump_json(exclude=usage_null))

        results: dict[int, GenerationResult] = {}
        async with _sse_errors(self):
            if self.echo:
                for k in range(len(self.streams)):
                    yield chunk([P.CompletionChoice(index=k, text=self.prefix(k), finish_reason=None)])
            offsets = {k: len(self.prefix(k)) for k in range(len(self.streams))}
            async for k, event in self.events():
                done = event.result
                if event.text or event.logprobs or done is not None:
                    lp = self._completion_logprobs(event.logprobs, offsets[k])
                    if event.logprobs:
                        offsets[k] += sum(len(t.token) for t in event.logprobs)
                    yield chunk([P.CompletionChoice(index=k, text=event.text, logprobs=lp,
                                                    finish_reason=None if done is None else done.finish_reason)])
                if done is not None:
                    results[k] = done
            if self.include_usage:
                yield chunk([], self.usage(list(results.values())))
            yield _DONE


class _sse_errors:
    """Inside a stream whose headers are sent, an error becomes an SSE error event and the stream ends."""

    def __init__(self, job: _Job):
        self.job = job
        self.error: str | None = None

    async def __aenter__(self) -> _sse_errors:
        return self

    async def __aexit__(self, kind: type[BaseException] | None, e: BaseException | None, tb: object) -> bool:
        self.job.cancel()
        if e is None or not isinstance(e, Exception):    # done, or cancelled (client gone): propagate
            return False
        err = e if isinstance(e, ApiError) else _as_api_error(e)
        log.warning("stream ended by an error: %s", err.message)
        raise _StreamError(err) from None


class _StreamError(Exception):
    def __init__(self, err: ApiError):
        self.err = err


_DONE = "data: [DONE]\n\n"


def _data(payload: str) -> str:
    return f"data: {payload}\n\n"


def _sse(gen: AsyncIterator[str]) -> StreamingResponse:
    async def body() -> AsyncIterator[str]:
        try:
            async for item in gen:
                yield item
        except _StreamError as e:
            err = e.err
            yield _data(P.ErrorResponse(error=P.ErrorBody(message=err.message, type=err.type, param=err.param,
                                                          code=err.code)).model_dump_json())
            yield _DONE
        finally:
            await gen.aclose()   # type: ignore[attr-defined]
    return StreamingResponse(body(), media_type="text/event-stream",
                             headers={"Cache-Control": "no-cache", "X-Accel-Buffering": "no"})


async def _off_loop(size: int, fn: Callable[..., Any], *args: Any) -> Any:
    """`fn(*args)`, in a thread when `size` (characters to tokenize) is large enough to stall other requests."""
    if size < 32_768:
        return fn(*args)
    return await asyncio.to_thread(fn, *args)


def _retrieve(future: asyncio.Future) -> None:
    if not future.cancelled():
        future.exception()


async def _disconnected(request: Request) -> None:
    """Return when the client closes the connection (the body has been read; only disconnect comes next)."""
    while True:
        message = await request.receive()
        if message["type"] == "http.disconnect":
            return


def _lp(value: float) -> float:
    """A log-probability for JSON: -inf (a token the constraint or a bias excludes) as OpenAI's -9999."""
    return max(value, -9999.0)


def _chat_logprobs(lps: Sequence[TokenLogprob] | None) -> P.ChatLogprobs | None:
    if not lps:
        return None
    return P.ChatLogprobs(content=[
        P.TokenLogprob(token=t.token, logprob=_lp(t.logprob), bytes=list(t.bytes),
                       top_logprobs=[P.TopLogprob(token=a.token, logprob=_lp(a.logprob), bytes=list(a.bytes))
                                     for a in t.top_logprobs]) for t in lps])


def _named_param(message: str, req: BaseModel) -> str | None:
    """The request field an engine message starts with ("top_p must be ..."), if it is one."""
    word = re.match(r"[a-z_]+", message)
    if word is None:
        return None
    name = {"json": "response_format", "json_schema": "response_format"}.get(word.group(), word.group())
    return name if name in type(req).model_fields else None


def _assistant(r: GenerationResult) -> P.AssistantMessage:
    calls = [P.ToolCall(id=c.id, function=P.FunctionCall(name=c.name, arguments=c.arguments)) for c in r.tool_calls]
    return P.AssistantMessage(content=r.text if r.text or not calls else None, tool_calls=calls or None)


def _template_message(m: P.ChatMessage) -> dict[str, Any]:
    """A chat message as the template takes it (developer is the newer name of system; an assistant message
    with tool calls may have no content)."""
    content = None if m.content is None and m.tool_calls else m.text()
    out: dict[str, Any] = {"role": "system" if m.role == "developer" else m.role, "content": content}
    if m.name is not None:
        out["name"] = m.name
    if m.tool_calls is not None:
        out["tool_calls"] = m.tool_calls
    if m.tool_call_id is not None:
        out["tool_call_id"] = m.tool_call_id
    return out


def _refuse_unsupported(names: list[str]) -> None:
    if names:
        raise ApiError(400, f"'{names[0]}' is not supported by this server yet", param=names[0],
                       code="unsupported_parameter")


def _check_ids(ids: Sequence[int] | dict[int, float], vocab: int, param: str) -> None:
    bad = next((t for t in ids if not 0 <= t < vocab), None)
    if bad is not None:
        raise ApiError(400, f"token id {bad} is outside the vocabulary (size {vocab})", param=param,
                       code="invalid_value")


def _encode_vector(v: Any, fmt: str | None) -> list[float] | str:
    import base64

    import numpy as np
    arr = np.asarray(v, dtype=np.float32).reshape(-1)
    if fmt == "base64":
        return base64.b64encode(arr.tobytes()).decode()
    return arr.tolist()


def _id(prefix: str) -> str:
    return f"{prefix}-{secrets.token_hex(12)}"


def _too_large(limit: int) -> ApiError:
    return ApiError(413, f"the request body exceeds the limit of {limit} bytes", code="request_too_large")


def _timeout(seconds: float) -> ApiError:
    return ApiError(504, f"the request did not finish within the server's timeout of {seconds:g} s",
                    "timeout_error", code="timeout")


def _as_api_error(e: BaseException, param: str | None = None) -> ApiError:
    """The HTTP answer for an exception out of the engine (or anywhere in a route)."""
    if isinstance(e, ApiError):
        return e
    if isinstance(e, QueueFullError):
        return ApiError(429, str(e), "requests", code="rate_limit_exceeded", headers={"Retry-After": "1"})
    if isinstance(e, ContextLengthError):
        return ApiError(400, str(e), param=param, code="context_length_exceeded")
    if isinstance(e, (InvalidParameterError, TemplateError, TokenizerError)):
        return ApiError(400, str(e), param=param, code="invalid_value")
    if isinstance(e, ClosedError):
        return ApiError(503, str(e), "server_error", code="shutting_down")
    if isinstance(e, OxigpuError):
        log.error("request failed: %s", e)
        return ApiError(500, str(e), "server_error")
    log.error("request failed with an unexpected error", exc_info=e)
    return ApiError(500, f"internal error ({type(e).__name__}); see the server log", "server_error")


_IDENT = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")


def _validation_error(e: ValidationError) -> ApiError:
    """pydantic's errors as OpenAI's: one message naming the parameter (e.g. "messages[0].role")."""
    errors = e.errors(include_url=False)
    first = errors[0]
    if first["type"] in ("json_invalid", "json_type"):
        return ApiError(400, f"the body is not valid JSON ({first['msg']}); send one JSON object encoded as "
                             f"UTF-8", code="invalid_json")
    if not first["loc"]:
        return ApiError(400, f"the body must be a JSON object ({first['msg']})", code="invalid_json")
    param = _param(first["loc"])
    top = first["loc"][0]
    if len([x for x in errors if x["loc"][:1] == (top,)]) > 1 and top in P.EXPECTED:
        return ApiError(400, f"Invalid type for '{param}': expected {P.EXPECTED[top]}", param=param,
                        code="invalid_type")
    if first["type"] == "missing":
        return ApiError(400, f"Missing required parameter: '{param}'", param=param, code="missing_required_parameter")
    value = first.get("input")
    shown = repr(value) if isinstance(value, (int, float, str, bool)) or value is None else type(value).__name__
    msg = first["msg"].removeprefix("Value error, ")
    return ApiError(400, f"Invalid value for '{param}': {msg} (got {shown[:80]})", param=param,
                    code="invalid_type" if first["type"].endswith("_type") else "invalid_value")


def _param(loc: tuple[Any, ...]) -> str:
    """("messages", 0, "content", "str") -> "messages[0].content": pydantic's union tags dropped."""
    out = ""
    for part in loc:
        if isinstance(part, int):
            out += f"[{part}]"
        elif _IDENT.match(part) and part not in ("str", "int", "float", "bool", "list", "dict"):
            out += f".{part}" if out else part
    return out


class _Guard:
    """ASGI middleware: the API key on every route but /health, and requests counted by route and status.

    Runs before routing and before any of the body is read, so an unauthenticated request costs nothing.
    """

    def __init__(self, app: Any, api_key: str | None, metrics: Metrics):
        self.app = app
        self.key = None if api_key is None else f"Bearer {api_key}".encode()
        self.metrics = metrics

    async def __call__(self, scope: dict[str, Any], receive: Any, send: Any) -> None:
        if scope["type"] != "http":
            await self.app(scope, receive, send)
            return
        path = scope["path"]
        route = path if path in ROUTES else "/v1/models" if path.startswith("/v1/models/") else "other"
        status = 500

        async def counted_send(message: dict[str, Any]) -> None:
            nonlocal status
            if message["type"] == "http.response.start":
                status = message["status"]
            await send(message)

        try:
            if self.key is not None and path != "/health" and not self._authorized(scope):
                await ApiError(401, "Invalid or missing API key: send 'Authorization: Bearer <key>'",
                               code="invalid_api_key", headers={"WWW-Authenticate": "Bearer"}
                               ).response()(scope, receive, counted_send)
                return
            await self.app(scope, receive, counted_send)
        finally:
            self.metrics.requests.labels(route=route, status=str(status)).inc()

    def _authorized(self, scope: dict[str, Any]) -> bool:
        given = b""
        for name, value in scope["headers"]:
            if name == b"authorization":
                given = value
                break
        return hmac.compare_digest(given, self.key)   # type: ignore[arg-type]
