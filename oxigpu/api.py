"""The Python API: ``LLM`` loads a GGUF model once and generates, streams, chats and scores text.

    from oxigpu import LLM
    llm = LLM()                                  # the default model (SmolLM2-135M-Instruct), auto backend
    print(llm.generate("The capital of France is", max_tokens=16, temperature=0).text)
    for piece in llm.stream("Once upon a time", max_tokens=64, seed=1):
        print(piece, end="", flush=True)

Decisions a caller can rely on:

* Prompts are text (tokenized with the model's BOS rule; special-token strings such as ``<|im_start|>``
  become their ids, as in llama.cpp) or a list of token ids, used as given.
* An empty text prompt is an error (``InvalidParameterError``) rather than a silent BOS-only
  generation; for unconditional generation pass ``[llm.tokenizer.bos_id]``.
* A prompt must leave room to generate: at most ``n_ctx - 1`` tokens, else ``ContextLengthError``.
  Generation ends with finish_reason "length" at ``max_tokens`` or when the context is full, "stop" at an
  end-of-generation token or a stop string (which is never part of the text).
* The same seed, prompt and settings give the same tokens on the same backend, alone or batched with
  other requests (up to float rounding: batched steps may sum in another order, which can flip a
  near-tie); ``seed=None`` everywhere draws a fresh seed. Across backends (numpy, wgpu) the distribution
  is the same, and greedy tokens agree except at near-ties: their logits differ by float rounding.
* Many sequences run at once: ``generate([p1, p2, ...])`` returns one result per prompt, ``n=k`` gives k
  completions of a prompt (seeds seed, seed + 1, ...; they share the prompt's KV blocks), and one ``LLM``
  may be shared by threads, whose requests are batched together: a thread waiting for its next token runs
  a step that advances every running request (the scheduler, ``runtime/scheduler.py``). A request that
  does not fit the KV pool waits or is preempted and recomputed later, never failed.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np

from .errors import ContextLengthError, InvalidParameterError, OxigpuError
from .limits import MAX_OUTPUT_CHARS
from .runtime.embed import Embedder
from .runtime.engine import Engine, Generation, Progress
from .runtime.params import GenerationResult, SamplingParams
from .runtime.tools import ChatPlan, plan_chat

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

Message = Mapping[str, Any]
Prompt = str | Sequence[int]


class SamplingOverrides(TypedDict, total=False):
    """Keyword arguments accepted wherever a SamplingParams can be given; None keeps the default."""

    max_tokens: int | None
    temperature: float | None
    top_k: int | None
    top_p: float | None
    min_p: float | None
    repeat_penalty: float | None
    repeat_last_n: int | None
    presence_penalty: float | None
    frequency_penalty: float | None
    stop: str | Sequence[str] | None
    seed: int | None
    logit_bias: Mapping[int, float] | None
    typical_p: float | None
    top_n_sigma: float | None
    dynatemp_range: float | None
    dynatemp_exponent: float | None
    xtc_probability: float | None
    xtc_threshold: float | None
    dry_multiplier: float | None
    dry_base: float | None
    dry_allowed_length: int | None
    dry_penalty_last_n: int | None
    dry_sequence_breakers: Sequence[str] | None
    mirostat: int | None
    mirostat_tau: float | None
    mirostat_eta: float | None
    logprobs: bool | None
    top_logprobs: int | None
    json: bool | None
    json_schema: Mapping[str, Any] | str | None
    grammar: str | None
    regex: str | None


def resolve_model_path(model_path: str | Path | None, log: Callable[[str], None] | None = None) -> Path:
    """`model_path`, the name of a packaged model (``oxigpu models``), or for None the default model
    (SmolLM2-135M-Instruct, from its PyPI package).

    Raises ModelNotFoundError when the file does not exist, or with the pip command when the packaged model
    is not installed.
    """
    if model_path is not None and not Path(model_path).exists():
        from . import hub
        from .model_packages import MODELS
        ref = None if str(model_path) in MODELS else hub.parse_ref(str(model_path))
        if ref is not None:   # org/repo:QUANT or org/repo/file.gguf: from the Hugging Face Hub
            return hub.download(ref)
    from .model_packages import resolve
    return resolve(model_path) if log is None else resolve(model_path, log=log)


class LLM:
    """A GGUF model loaded on a backend, ready to generate.

    Args:
        model_path: a .gguf file; None loads the default model.
        backend: "auto" (a hardware GPU when the wgpu backend can use one, else numpy), "wgpu" or "numpy".
        n_ctx: context window in tokens (default 4096, never above the model's training context).
        seed: default seed for calls that pass none (None: a fresh seed per call).
        verbose: print load and per-call timing lines on stderr.
        progress: called as (stage, done, total) while loading.
        max_seqs: sequences decoded together at most (default: 8 on numpy, 64 on a GPU).
        kv_memory: bytes of KV cache (default: a share of host memory on the CPU, 8 GiB on a GPU; never
            less than one full context, and at most ``max_seqs`` of them).
        chat_template: jinja2 source used by chat() instead of the file's template (rendered in the same
            sandbox); checked at once, so a malformed one raises TemplateError here.
        draft_model: speculative decoding with this draft model (a .gguf path, a packaged model's name or a
            loaded ``LLM``; the same vocabulary as the model, e.g. a smaller model of its family): it drafts
            ``num_tokens`` tokens, the model verifies them in one step. Loaded on the same backend.
        speculative: speculative decoding's settings: a method name ("draft", "lookup": prompt lookup,
            n-gram drafts from the context without a second model) or a dict such as ``{"method": "lookup",
            "num_tokens": 5, "ngram": 3}`` (``runtime/speculative.py``: what it supports, how it verifies).
            A draft model alone means ``"draft"`` with 5 tokens. Greedy output is the plain decoder's; sampled
            output has the same distribution. Requests asking for constraints, mirostat or logprobs are refused.
        cache_type_k, cache_type_v: the KV cache's types, as llama.cpp's ``-ctk`` / ``-ctv``: "f16" (default),
            "q8_0" (about half the bytes, perplexity within ~0.1 %) or "q4_0" (about a quarter).
    """

    def __init__(self, model_path: str | Path | None = None, backend: str = "auto", n_ctx: int | None = None,
                 seed: int | None = None, verbose: bool = False, progress: Progress | None = None,
                 chat_template: str | None = None, max_seqs: int | None = None, kv_memory: int | None = None,
                 draft_model: str | Path | LLM | None = None, speculative: Any = None,
                 cache_type_k: str = "f16", cache_type_v: str = "f16"):
        self.defaults = SamplingParams(seed=seed)
        self.verbose = verbose
        if chat_template is not None and (not isinstance(chat_template, str) or not chat_template.strip()):
            raise InvalidParameterError("chat_template must be the template's (non-empty) jinja2 source text")
        path = resolve_model_path(model_path)
        self._embedder: Embedder | None = None
        if _is_encoder(path):   # an embedding model: it embeds, generation calls refuse
            self._engine = self._embedder = Embedder(path, backend=backend, n_ctx=n_ctx, progress=progress)
        else:
            self._engine = Engine(path, backend=backend, n_ctx=n_ctx, progress=progress, max_seqs=max_seqs,
                                  kv_memory=kv_memory, cache_type_k=cache_type_k, cache_type_v=cache_type_v)
        if chat_template is not None:
            self._engine.tokenizer.set_chat_template(chat_template)
        self._draft: LLM | None = None
        if draft_model is not None or speculative not in (None, False):
            self.speculate(draft_model, speculative)
        if verbose:
            e = self._engine
            print(f"oxigpu: loaded {e.model_path.name} ({e.hparams.arch}, {e.hparams.n_layer} layers, "
                  f"vocab {e.vocab_size}) on {e.backend_name}, n_ctx={e.n_ctx}, in {e.load_s:.2f} s",
                  file=sys.stderr)

    @classmethod
    def from_pretrained(cls, repo: str, quant: str | None = None, filename: str | None = None,
                        token: str | None = None, revision: str = "main", **kwargs: Any) -> LLM:
        """Load ``repo``'s GGUF file of type ``quant`` (e.g. "Q4_K_M"), or ``filename``, from the Hugging Face
        Hub (through its cache; HF_HUB_OFFLINE, HF_ENDPOINT and HF_TOKEN apply). Other arguments go to LLM."""
        from . import hub
        if quant is not None and filename is not None:
            raise InvalidParameterError("give quant or filename, not both")
        ref = hub.parse_ref(repo)
        if ref is None or ref.quant or ref.filename:
            raise InvalidParameterError(f"repo must be 'org/name', got {repo!r}")
        path = hub.download(hub.HubRef(ref.repo, quant, filename, revision), token=token)
        return cls(path, **kwargs)

    def speculate(self, draft_model: str | Path | LLM | None = None, speculative: Any = None) -> None:
        """Turn speculative decoding on (as the constructor's ``draft_model=`` and ``speculative=``), or off
        with neither."""
        from .runtime.speculative import SpeculativeConfig, Speculator
        if self.is_embedding_model:
            raise InvalidParameterError("speculative decoding is for generation models; this is an embedding model")
        config = SpeculativeConfig.parse(speculative, draft_model is not None)
        with self._engine.lock:       # the old speculator's draft cache goes back to the draft model's pool
            old, self._engine.speculator = self._engine.speculator, None
            if old is not None:
                old.close()
        self._draft = None
        if config is None:
            return
        draft = None
        if draft_model is not None:
            if isinstance(draft_model, LLM):
                self._draft = draft_model
            elif isinstance(draft_model, (str, Path)):
                self._draft = LLM(draft_model, backend=self.backend, n_ctx=self.n_ctx, max_seqs=1)
            else:
                raise InvalidParameterError(f"draft_model must be a GGUF path, a packaged model's name or an LLM, "
                                            f"got {type(draft_model).__name__}")
            if self._draft.is_embedding_model:
                raise InvalidParameterError("the draft model is an embedding model; it must generate")
            draft = self._draft.engine
        with self._engine.lock:
            self._engine.speculator = Speculator(self._engine, config, draft)

    @property
    def speculative_stats(self) -> dict[str, float] | None:
        """Speculative decoding's counters so far (rounds, drafted, accepted, acceptance_rate,
        tokens_per_round, ...), or None without speculation."""
        spec = getattr(self._engine, "speculator", None)
        return None if spec is None else spec.stats.as_dict()

    # -- facts ----------------------------------------------------------------------------------------
    @property
    def tokenizer(self) -> Tokenizer:
        return self._engine.tokenizer

    @property
    def n_ctx(self) -> int:
        return self._engine.n_ctx

    @property
    def backend(self) -> str:
        """The backend actually in use ("numpy" or "wgpu"), after "auto" was resolved."""
        return self._engine.backend_name

    @property
    def model_path(self) -> Path:
        return self._engine.model_path

    @property
    def arch(self) -> str:
        return self._engine.hparams.arch

    @property
    def load_s(self) -> float:
        return self._engine.load_s

    def __repr__(self) -> str:
        return f"LLM({str(self.model_path)!r}, arch={self.arch!r}, backend={self.backend!r}, n_ctx={self.n_ctx})"

    # -- tokens ---------------------------------------------------------------------------------------
    def tokenize(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids for `text`, as prompts are tokenized (BOS per the model; special strings parsed)."""
        return self.tokenizer.encode(text, add_special=add_special, parse_special=parse_special)

    def detokenize(self, ids: Sequence[int], skip_special: bool = False) -> str:
        return self.tokenizer.decode(ids, skip_special=skip_special)

    # -- generation -----------------------------------------------------------------------------------
    @property
    def engine(self) -> Engine:
        """The engine underneath (plans, KV pool, scheduler), for tools and tests."""
        return self._engine

    def generate(self, prompt: Prompt | Sequence[Prompt], params: SamplingParams | None = None, *, n: int = 1,
                 **overrides: Unpack[SamplingOverrides]) -> Any:
        """Complete `prompt`. Keyword arguments override fields of `params` (or of the defaults).

        A list of prompts (texts or token lists) runs them together and returns one result per prompt;
        ``n`` > 1 returns n completions (a list) per prompt, drawn with seeds seed, seed + 1, ...
        """
        if isinstance(n, bool) or not isinstance(n, int) or n < 1:
            raise InvalidParameterError(f"n must be a positive integer, got {n!r}")
        batch = _is_batch(prompt)
        prompts = list(prompt) if batch else [prompt]
        if batch and not prompts:
            raise InvalidParameterError("the list of prompts is empty")
        p = self._params(params, overrides)
        eng = self._engine
        groups = []
        for ids in [self._prompt_ids(x, max_tokens=self.n_ctx - 1) for x in prompts]:   # all checked first
            first = eng.request(ids, p)
            groups.append([first] + [eng.request(ids, p, after=first, seed_offset=i) for i in range(1, n)])
        reqs = [r for g in groups for r in g]
        for r in reqs:
            eng.scheduler.submit(r)
        eng.run_until_done(reqs)
        results = [[self._report(r.result) for r in g] for g in groups]
        out = [g[0] if n == 1 else g for g in results]
        return out if batch else out[0]

    def stream(self, prompt: Prompt, params: SamplingParams | None = None,
               **overrides: Unpack[SamplingOverrides]) -> Generation:
        """Like generate, but an iterator of text pieces (whole UTF-8 characters, stop strings held back).

        ``close()`` (or leaving ``with llm.stream(...) as s:``) ends it before the next token; the LLM
        stays usable. After exhaustion, ``.result`` holds the GenerationResult.
        """
        sampling = self._params(params, overrides)
        return self._engine.start(self._prompt_ids(prompt, max_tokens=self.n_ctx - 1), sampling)

    def chat(self, messages: Sequence[Message], params: SamplingParams | None = None,
             tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: Any = None, *,
             parse_special_in_messages: bool = False, **overrides: Unpack[SamplingOverrides]) -> GenerationResult:
        """The assistant's reply to `messages` ([{"role": "system"|"user"|"assistant"|"tool", "content": ...}]).

        ``tools`` (OpenAI's function tools) and ``tool_choice`` ("auto", "none", "required" or
        {"type": "function", "function": {"name": ...}}): the calls the model makes come back as
        ``result.tool_calls`` with finish_reason "tool_calls"; answer them with ``{"role": "tool",
        "tool_call_id": ..., "content": ...}`` messages after the assistant's (``{"role": "assistant",
        "content": ..., "tool_calls": [...]}``). See ``runtime/tools.py``.

        Message text is tokenized as text: a control-token string inside a message (``<|im_end|>``) stays
        text, so no message can end its turn or open another; ``parse_special_in_messages=True`` parses
        them (see `chat_prompt`)."""
        gen = self.stream_chat(messages, params, tools, tool_choice,
                               parse_special_in_messages=parse_special_in_messages, **overrides)
        for _ in gen:
            pass
        return self._report(gen.result)

    def stream_chat(self, messages: Sequence[Message], params: SamplingParams | None = None,
                    tools: Sequence[Mapping[str, Any]] | None = None, tool_choice: Any = None, *,
                    parse_special_in_messages: bool = False, **overrides: Unpack[SamplingOverrides]) -> Generation:
        """chat() as a stream of text pieces (see stream()); with tools, the pieces are the model's text as
        it writes it (call markup included) and ``.result`` has the parsed calls."""
        plan = self.chat_plan(messages, tools, tool_choice)
        merged = self._params(params, overrides)
        if plan.constraint:
            if merged.constrained:
                raise InvalidParameterError("a constraint (json, json_schema, grammar, regex) cannot be combined "
                                            f"with tool_choice={tool_choice!r}: the tool calls are constrained")
            merged = merged.with_overrides(**plan.constraint)
        prompt = self.tokenizer.apply_chat_template(plan.messages, add_generation_prompt=True, tools=plan.tools,
                                                    max_tokens=self.n_ctx - 1,
                                                    parse_special_in_messages=parse_special_in_messages)
        return self._engine.start(prompt, merged, plan.finish)

    def chat_prompt(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None,
                    tool_choice: Any = None, *, parse_special_in_messages: bool = False) -> list[int]:
        """The prompt tokens for `messages` (and `tools`) through the model's chat template.

        Models without a template get a fallback chosen by their turn tokens (Gemma turns, ChatML or a plain
        "User:/Assistant:" transcript); the prompt starts with exactly one BOS where the model uses one.
        The template's markup becomes control tokens; the messages' text stays text, control-token strings
        included, unless ``parse_special_in_messages=True`` (then ``<|im_start|>system`` typed in a message
        opens a real system turn, as in llama.cpp).
        """
        plan = self.chat_plan(messages, tools, tool_choice)
        return self.tokenizer.apply_chat_template(plan.messages, add_generation_prompt=True, tools=plan.tools,
                                                  max_tokens=self.n_ctx - 1,
                                                  parse_special_in_messages=parse_special_in_messages)

    def chat_plan(self, messages: Sequence[Message], tools: Sequence[Mapping[str, Any]] | None = None,
                  tool_choice: Any = None) -> ChatPlan:
        """How a chat with these tools runs on this model (``runtime.tools.ChatPlan``: the messages and
        tools its template renders, the constraint of the reply, the parser of its calls)."""
        _check_messages(messages)
        return plan_chat(messages, tools, tool_choice, self.tokenizer.chat.source)

    # -- evaluation -----------------------------------------------------------------------------------
    def logits(self, tokens: Prompt) -> np.ndarray:
        """Teacher-forced logits [len(tokens), vocab]: row i predicts token i + 1 (for evaluation)."""
        return np.concatenate(list(self._engine.eval_all(self._prompt_ids(tokens, max_tokens=self.n_ctx))), axis=0)

    def perplexity(self, text: str) -> float:
        """exp(mean negative log-likelihood) of `text`'s tokens, each predicted from the ones before.

        Text longer than the context is scored in consecutive windows of n_ctx tokens (each window's first
        token has no context and is not scored), as llama.cpp's perplexity tool does.
        """
        ids = self._prompt_ids(text)
        if len(ids) < 2:
            raise InvalidParameterError("perplexity needs a text of at least 2 tokens")
        nll, count = 0.0, 0
        for w in range(0, len(ids) - 1, self.n_ctx):
            window = ids[w:w + self.n_ctx]
            row = 0
            for block in self._engine.eval_all(window):
                targets = np.asarray(window[row + 1:row + 1 + block.shape[0]])
                scores = block[:len(targets)].astype(np.float64)
                top = scores.max(axis=1, keepdims=True)
                log_z = top[:, 0] + np.log(np.exp(scores - top).sum(axis=1))
                nll += float((log_z - scores[np.arange(len(targets)), targets]).sum())
                count += len(targets)
                row += block.shape[0]
        return math.exp(nll / count)

    # -- embeddings -----------------------------------------------------------------------------------
    @property
    def is_embedding_model(self) -> bool:
        """True for encoder models (bert, nomic-bert), which embed and do not generate; decoders embed too
        (pooled hidden states) but are generation models."""
        return self._engine is self._embedder

    def embed(self, texts: str | Sequence[str], pooling: str | None = None, normalize: bool = True) -> np.ndarray:
        """Embeddings of ``texts``: [len(texts), dim] float32 (one string: [dim]).

        Encoder models (bert, nomic-bert) pool as their file says (mean or CLS); decoders pool ``"last"``
        unless ``pooling`` is ``"mean"`` (or ``"cls"``). ``normalize`` scales each vector to unit length.
        A decoder model loads a second copy of its weights for this on the first call.
        """
        if self._embedder is None:
            self._embedder = Embedder(self.model_path, backend=self.backend, n_ctx=self.n_ctx)
        return self._embedder.embed(texts, pooling, normalize)

    # -- helpers --------------------------------------------------------------------------------------
    def _prompt_ids(self, prompt: Prompt, max_tokens: int | None = None) -> list[int]:
        """Token ids of `prompt`; text that cannot fit in `max_tokens` is refused from its length alone,
        before tokenizing (a 20 MiB prompt for a small context costs nothing)."""
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidParameterError(
                    "the prompt is empty; pass some text (or, for unconditional generation, the token list "
                    "[llm.tokenizer.bos_id])")
            if max_tokens is not None:
                self.tokenizer.check_fits(prompt, max_tokens)
            return self.tokenize(prompt)
        if isinstance(prompt, (bytes, bytearray, memoryview)):
            raise InvalidParameterError("a prompt must be a string or a sequence of token ids, not bytes; "
                                        "decode it to a string first")
        try:
            ids = list(prompt)
        except TypeError:
            raise InvalidParameterError(f"a prompt must be a string or a sequence of token ids (ints), got "
                                        f"{type(prompt).__name__}") from None
        if any(isinstance(t, bool) or not isinstance(t, (int, np.integer)) for t in ids):
            raise InvalidParameterError("a prompt must be a string or a sequence of token ids (ints)")
        return [int(t) for t in ids]

    def sampling_params(self, params: SamplingParams | None = None,
                        **overrides: Unpack[SamplingOverrides]) -> SamplingParams:
        """``params`` (or this LLM's defaults) with ``overrides`` applied and the default seed filled in: what
        a call with these arguments samples with."""
        return self._params(params, overrides)

    def _params(self, params: SamplingParams | None, overrides: Mapping[str, Any]) -> SamplingParams:
        merged = (params or self.defaults).with_overrides(**overrides)
        if merged.seed is None and self.defaults.seed is not None:
            merged = merged.with_overrides(seed=self.defaults.seed)
        return merged

    def _report(self, result: GenerationResult | None) -> GenerationResult:
        assert result is not None  # a finished, uncancelled request always has one
        if self.verbose:
            print(f"oxigpu: {result.timings.summary()} | finish: {result.finish_reason}", file=sys.stderr)
        return result


def _is_encoder(path: Path) -> bool:
    """Whether the file's architecture is an embedding encoder (bert, nomic-bert)."""
    from .gguf import GGUFFile
    from .models import get_family
    with GGUFFile(path) as f:
        arch = f.arch
    try:
        return get_family(arch).encoder
    except OxigpuError:
        return False     # the engine reports the unsupported architecture


def load(model_path: str | Path | None = None, **kwargs: Any) -> LLM:
    """``LLM(model_path, **kwargs)``: the default model when no path is given."""
    return LLM(model_path, **kwargs)


def _is_batch(prompt: Any) -> bool:
    """A list of prompts (texts or token lists), as opposed to one prompt (a text or a list of ids)."""
    return isinstance(prompt, (list, tuple)) and bool(prompt) and all(
        isinstance(p, (str, list, tuple, np.ndarray)) for p in prompt)


def _check_messages(messages: Sequence[Message]) -> None:
    if isinstance(messages, (str, bytes)) or not messages:
        raise InvalidParameterError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str):
            raise InvalidParameterError(f"messages[{i}] must be a dict with string 'role' and 'content'")
        calls = m.get("tool_calls")
        if calls is not None:
            if m["role"] != "assistant" or not isinstance(calls, Sequence) or isinstance(calls, (str, bytes)) \
                    or not all(isinstance(c, Mapping) and isinstance(c.get("function", c), Mapping)
                               and isinstance(c.get("function", c).get("name"), str) for c in calls):
                raise InvalidParameterError(f"messages[{i}].tool_calls must be a list of {{'function': {{'name': "
                                            f"..., 'arguments': ...}}}} on an assistant message")
            if m.get("content") is not None and not isinstance(m.get("content"), str):
                raise InvalidParameterError(f"messages[{i}].content must be a string or null")
        elif not isinstance(m.get("content"), str):
            raise InvalidParameterError(f"messages[{i}] must be a dict with string 'role' and 'content'")
        if isinstance(m.get("content"), str) and len(m["content"]) > MAX_OUTPUT_CHARS:   # refused before any work
            raise ContextLengthError(f"messages[{i}] holds {len(m['content'])} characters, more than any chat "
                                     f"prompt may ({MAX_OUTPUT_CHARS}, oxigpu.limits.MAX_OUTPUT_CHARS)")
