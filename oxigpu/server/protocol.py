"""The OpenAI wire format: pydantic models of the requests the server accepts and the responses it sends.

Requests are parsed strictly (a string where a number belongs is an error, as OpenAI's API has it, not a
coercion) and fields the server does not know are ignored, as OpenAI ignores them. Ranges follow OpenAI's
(temperature 0..2, penalties -2..2, logit_bias -100..100) and the extensions follow llama-server (top_k,
min_p, repeat_penalty, the other samplers, grammar), whose ranges SamplingParams checks. `unsupported()` lists
fields a request sets to something the server cannot do (a suffix, best_of, non-text content parts).
"""
from __future__ import annotations

from typing import Any, Literal

from pydantic import BaseModel, ConfigDict, Field, field_validator, model_serializer

_REQUEST = ConfigDict(strict=True, extra="ignore", allow_inf_nan=False)
MAX_N = 16          # choices per request
MAX_STOP = 16       # stop strings per request

TokenIds = list[int]


class ParamError(ValueError):
    """A request value the models cannot check alone (it needs others), naming the parameter."""

    def __init__(self, param: str, message: str):
        super().__init__(message)
        self.param = param


class StreamOptions(BaseModel):
    model_config = _REQUEST
    include_usage: bool = False
    continuous_usage_stats: bool = False     # vLLM's extension: every chunk carries the usage so far


class _Sampling(BaseModel):
    """The settings chat and text completions share."""

    model_config = _REQUEST
    model: str | None = None
    max_tokens: int | None = Field(None, ge=1)
    temperature: float | None = Field(None, ge=0, le=2)
    top_p: float | None = Field(None, gt=0, le=1)
    n: int | None = Field(None, ge=1, le=MAX_N)
    stop: str | list[str] | None = None
    seed: int | None = Field(None, ge=-2**63, lt=2**64)
    presence_penalty: float | None = Field(None, ge=-2, le=2)
    frequency_penalty: float | None = Field(None, ge=-2, le=2)
    logit_bias: dict[str, float] | None = None
    stream: bool | None = None
    stream_options: StreamOptions | None = None
    user: str | None = None
    # llama-server's extensions
    top_k: int | None = Field(None, ge=-1)           # -1 or 0: off
    min_p: float | None = Field(None, ge=0, le=1)
    repeat_penalty: float | None = Field(None, gt=0, le=10)
    repeat_last_n: int | None = Field(None, ge=0)
    ignore_eos: bool | None = None                    # generate max_tokens whatever comes (benchmarks)
    # llama-server's other samplers and its grammar field (ranges checked by SamplingParams)
    typical_p: float | None = None
    top_n_sigma: float | None = None
    dynatemp_range: float | None = None
    dynatemp_exponent: float | None = None
    xtc_probability: float | None = None
    xtc_threshold: float | None = None
    dry_multiplier: float | None = None
    dry_base: float | None = None
    dry_allowed_length: int | None = None
    dry_penalty_last_n: int | None = None
    dry_sequence_breakers: list[str] | None = None
    mirostat: int | None = None
    mirostat_tau: float | None = None
    mirostat_eta: float | None = None
    grammar: str | None = None
    # {"type": "text" | "json_object" | "json_schema", "json_schema": {"name", "schema", "strict"}}
    response_format: dict[str, Any] | None = None

    @field_validator("stop")
    @classmethod
    def _stops(cls, v: str | list[str] | None) -> str | list[str] | None:
        stops = [v] if isinstance(v, str) else v or []
        if len(stops) > MAX_STOP:
            raise ValueError(f"at most {MAX_STOP} stop strings")
        if any(not s for s in stops):
            raise ValueError("stop strings must not be empty")
        return v

    @field_validator("logit_bias")
    @classmethod
    def _bias(cls, v: dict[str, float] | None) -> dict[str, float] | None:
        for key, bias in (v or {}).items():
            if not key.isdigit():
                raise ValueError(f"keys must be token ids (decimal strings), got {key!r}")
            if not -100 <= bias <= 100:
                raise ValueError(f"biases must be in [-100, 100], got {bias} for token {key}")
        return v

    def stop_list(self) -> tuple[str, ...]:
        return (self.stop,) if isinstance(self.stop, str) else tuple(self.stop or ())

    def unsupported(self) -> list[str]:
        """Fields set to something the server cannot do."""
        return []

    def extensions(self) -> dict[str, Any]:
        """The llama-server sampler settings that were given, by SamplingParams name."""
        return {k: getattr(self, k) for k in EXTENSIONS if getattr(self, k) is not None}

    def constraint(self) -> dict[str, Any]:
        """response_format / grammar as SamplingParams overrides (json, json_schema, grammar)."""
        out: dict[str, Any] = {}
        rf = self.response_format
        if rf is not None:
            kind = rf.get("type")
            if kind == "json_object":
                out["json"] = True
            elif kind == "json_schema":
                spec = rf.get("json_schema")
                schema = spec.get("schema") if isinstance(spec, dict) else None
                if not isinstance(schema, dict):
                    raise ParamError("response_format", "response_format json_schema needs "
                                     "{'json_schema': {'name': ..., 'schema': {...}}}")
                out["json_schema"] = schema
            elif kind != "text":
                raise ParamError("response_format", "response_format type must be 'text', 'json_object' or "
                                 f"'json_schema', got {kind!r}")
        if self.grammar is not None:
            if out:
                raise ParamError("grammar", "grammar and a JSON response_format cannot be combined")
            out["grammar"] = self.grammar
        return out


EXTENSIONS = ("typical_p", "top_n_sigma", "dynatemp_range", "dynatemp_exponent", "xtc_probability", "xtc_threshold",
              "dry_multiplier", "dry_base", "dry_allowed_length", "dry_penalty_last_n", "dry_sequence_breakers",
              "mirostat", "mirostat_tau", "mirostat_eta")


class TextPart(BaseModel):
    model_config = _REQUEST
    type: str
    text: str | None = None


class ChatMessage(BaseModel):
    model_config = _REQUEST
    role: Literal["system", "developer", "user", "assistant", "tool"]
    content: str | list[TextPart] | None = None
    name: str | None = None
    tool_calls: list[dict[str, Any]] | None = None
    tool_call_id: str | None = None

    def text(self) -> str:
        """The content as one string: text parts joined (other kinds of part are refused earlier)."""
        if self.content is None:
            return ""
        if isinstance(self.content, str):
            return self.content
        return "".join(p.text or "" for p in self.content)


class ChatCompletionRequest(_Sampling):
    messages: list[ChatMessage] = Field(min_length=1)
    max_completion_tokens: int | None = Field(None, ge=1)
    logprobs: bool | None = None
    top_logprobs: int | None = Field(None, ge=0, le=20)
    tools: list[dict[str, Any]] | None = None
    tool_choice: str | dict[str, Any] | None = None
    parallel_tool_calls: bool | None = None

    def unsupported(self) -> list[str]:
        out = super().unsupported()
        for i, m in enumerate(self.messages):
            if isinstance(m.content, list):
                for j, part in enumerate(m.content):
                    if part.type != "text" or part.text is None:
                        out.append(f"messages[{i}].content[{j}]")
        return out


class CompletionRequest(_Sampling):
    prompt: str | list[str] | TokenIds | list[TokenIds]
    echo: bool | None = None
    logprobs: int | None = Field(None, ge=0, le=5)
    best_of: int | None = Field(None, ge=1, le=MAX_N)
    suffix: str | None = None

    def prompts(self) -> list[str | list[int]]:
        """The prompt as a list of prompts (a string, a list of strings, token ids or lists of them)."""
        p = self.prompt
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [p]        # type: ignore[list-item]
        return list(p)        # type: ignore[arg-type]

    def unsupported(self) -> list[str]:
        out = super().unsupported()
        if self.suffix:
            out.append("suffix")
        if self.best_of is not None and self.best_of != (self.n or 1):
            out.append("best_of")
        return out


class EmbeddingRequest(BaseModel):
    model_config = _REQUEST
    input: str | list[str] | TokenIds | list[TokenIds]
    model: str | None = None
    encoding_format: Literal["float", "base64"] | None = None
    dimensions: int | None = Field(None, ge=1)
    user: str | None = None

    def inputs(self) -> list[str | list[int]]:
        p = self.input
        if isinstance(p, str):
            return [p]
        if p and isinstance(p[0], int):
            return [p]        # type: ignore[list-item]
        return list(p)        # type: ignore[arg-type]


class TokenizeRequest(BaseModel):
    """llama-server's /tokenize."""

    model_config = _REQUEST
    content: str
    add_special: bool = False
    parse_special: bool = True
    with_pieces: bool = False


class DetokenizeRequest(BaseModel):
    """llama-server's /detokenize."""

    model_config = _REQUEST
    tokens: TokenIds


EXPECTED = {
    "prompt": "a string, an array of strings, an array of token ids or an array of arrays of token ids",
    "input": "a string, an array of strings, an array of token ids or an array of arrays of token ids",
    "stop": "a string or an array of strings",
    "content": "a string or an array of content parts",
    "tool_choice": "a string or an object",
}
"""What a union-typed field takes, for the one-line error message (pydantic lists every alternative)."""


# -- responses -------------------------------------------------------------------------------------------
class _Response(BaseModel):
    model_config = ConfigDict(extra="forbid")


class Usage(_Response):
    prompt_tokens: int
    completion_tokens: int
    total_tokens: int


class FunctionCall(_Response):
    name: str
    arguments: str          # JSON text


class ToolCall(_Response):
    id: str
    type: Literal["function"] = "function"
    function: FunctionCall


class AssistantMessage(_Response):
    role: Literal["assistant"] = "assistant"
    content: str | None = None
    tool_calls: list[ToolCall] | None = None

    @model_serializer(mode="wrap")
    def _calls_when_any(self, handler: Any) -> dict[str, Any]:
        out = handler(self)
        if out.get("tool_calls") is None:
            out.pop("tool_calls", None)
        return out


class TopLogprob(_Response):
    token: str
    logprob: float
    bytes: list[int]


class TokenLogprob(TopLogprob):
    top_logprobs: list[TopLogprob]


class ChatLogprobs(_Response):
    content: list[TokenLogprob]
    refusal: None = None


class ChatChoice(_Response):
    index: int
    message: AssistantMessage
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None


class ChatCompletion(_Response):
    id: str
    object: Literal["chat.completion"] = "chat.completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChoice]
    usage: Usage


class FunctionCallDelta(_Response):
    name: str | None = None
    arguments: str | None = None

    @model_serializer(mode="wrap")
    def _present_only(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ToolCallDelta(_Response):
    """A streamed tool call's piece: its first carries id, type and name (arguments ""), later ones only
    fragments of its arguments, which a client appends (OpenAI's shape)."""

    index: int
    id: str | None = None
    type: Literal["function"] | None = None
    function: FunctionCallDelta | None = None

    @model_serializer(mode="wrap")
    def _present_only(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class Delta(_Response):
    """What a chunk adds to a choice; fields it does not change are left out, as OpenAI sends them."""

    role: Literal["assistant"] | None = None
    content: str | None = None
    tool_calls: list[ToolCallDelta] | None = None

    @model_serializer(mode="wrap")
    def _present_only(self, handler: Any) -> dict[str, Any]:
        return {k: v for k, v in handler(self).items() if v is not None}


class ChatChunkChoice(_Response):
    index: int
    delta: Delta
    logprobs: ChatLogprobs | None = None
    finish_reason: Literal["stop", "length", "tool_calls"] | None = None


class ChatCompletionChunk(_Response):
    id: str
    object: Literal["chat.completion.chunk"] = "chat.completion.chunk"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[ChatChunkChoice]
    usage: Usage | None = None


class CompletionLogprobs(_Response):
    """The legacy completions format: parallel lists, alternatives as {token: logprob}."""

    tokens: list[str]
    token_logprobs: list[float]
    top_logprobs: list[dict[str, float]] | None
    text_offset: list[int]


class CompletionChoice(_Response):
    index: int
    text: str
    logprobs: CompletionLogprobs | None = None
    finish_reason: Literal["stop", "length"] | None


class Completion(_Response):
    id: str
    object: Literal["text_completion"] = "text_completion"
    created: int
    model: str
    system_fingerprint: str | None = None
    choices: list[CompletionChoice]
    usage: Usage | None = None


class ModelCard(_Response):
    id: str
    object: Literal["model"] = "model"
    created: int
    owned_by: str = "oxigpu"


class ModelList(_Response):
    object: Literal["list"] = "list"
    data: list[ModelCard]


class Embedding(_Response):
    object: Literal["embedding"] = "embedding"
    index: int
    embedding: list[float] | str


class EmbeddingList(_Response):
    object: Literal["list"] = "list"
    data: list[Embedding]
    model: str
    usage: Usage


class ErrorBody(_Response):
    message: str
    type: str
    param: str | None = None
    code: str | None = None


class ErrorResponse(_Response):
    error: ErrorBody
