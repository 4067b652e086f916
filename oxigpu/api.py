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
* The same seed, prompt and settings give the same tokens; ``seed=None`` everywhere draws a fresh seed.
* One ``LLM`` may be shared by threads: its calls are serialized (``generate`` holds the model for the
  whole call, a stream for one token at a time), so results are what each call would get alone.
"""
from __future__ import annotations

import math
import sys
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypedDict, Unpack

import numpy as np

from .errors import InvalidParameterError
from .runtime.engine import Engine, Generation, Progress
from .runtime.params import GenerationResult, SamplingParams

if TYPE_CHECKING:
    from .tokenizer import Tokenizer

Message = Mapping[str, str]
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


def resolve_model_path(model_path: str | Path | None) -> Path:
    """`model_path`, the name of a packaged model (``oxigpu models``), or for None the default model
    (SmolLM2-135M-Instruct, from its PyPI package).

    Raises ModelNotFoundError when the file does not exist, or with the pip command when the packaged model
    is not installed.
    """
    from .model_packages import resolve
    return resolve(model_path)


class LLM:
    """A GGUF model loaded on a backend, ready to generate.

    Args:
        model_path: a .gguf file; None loads the default model.
        backend: "auto" (a hardware GPU when the wgpu backend can use one, else numpy), "wgpu" or "numpy".
        n_ctx: context window in tokens (default 4096, never above the model's training context).
        seed: default seed for calls that pass none (None: a fresh seed per call).
        verbose: print load and per-call timing lines on stderr.
        progress: called as (stage, done, total) while loading.
        chat_template: jinja2 source used by chat() instead of the file's template (rendered in the same
            sandbox); checked at once, so a malformed one raises TemplateError here.
    """

    def __init__(self, model_path: str | Path | None = None, backend: str = "auto", n_ctx: int | None = None,
                 seed: int | None = None, verbose: bool = False, progress: Progress | None = None,
                 chat_template: str | None = None):
        self.defaults = SamplingParams(seed=seed)
        self.verbose = verbose
        if chat_template is not None and (not isinstance(chat_template, str) or not chat_template.strip()):
            raise InvalidParameterError("chat_template must be the template's (non-empty) jinja2 source text")
        self._engine = Engine(resolve_model_path(model_path), backend=backend, n_ctx=n_ctx, progress=progress)
        if chat_template is not None:
            self._engine.tokenizer.set_chat_template(chat_template)
        if verbose:
            e = self._engine
            print(f"oxigpu: loaded {e.model_path.name} ({e.hparams.arch}, {e.hparams.n_layer} layers, "
                  f"vocab {e.vocab_size}) on {e.backend_name}, n_ctx={e.n_ctx}, in {e.load_s:.2f} s",
                  file=sys.stderr)

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
    def generate(self, prompt: Prompt, params: SamplingParams | None = None,
                 **overrides: Unpack[SamplingOverrides]) -> GenerationResult:
        """Complete `prompt`. Keyword arguments override fields of `params` (or of the defaults)."""
        gen = self.stream(prompt, params, **overrides)
        with self._engine.lock:
            for _ in gen:
                pass
        return self._done(gen)

    def stream(self, prompt: Prompt, params: SamplingParams | None = None,
               **overrides: Unpack[SamplingOverrides]) -> Generation:
        """Like generate, but an iterator of text pieces (whole UTF-8 characters, stop strings held back).

        ``close()`` (or leaving ``with llm.stream(...) as s:``) ends it before the next token; the LLM
        stays usable. After exhaustion, ``.result`` holds the GenerationResult.
        """
        return self._engine.start(self._prompt_ids(prompt), self._params(params, overrides))

    def chat(self, messages: Sequence[Message], params: SamplingParams | None = None,
             **overrides: Unpack[SamplingOverrides]) -> GenerationResult:
        """The assistant's reply to `messages` ([{"role": "system"|"user"|"assistant", "content": ...}])."""
        gen = self.stream_chat(messages, params, **overrides)
        with self._engine.lock:
            for _ in gen:
                pass
        return self._done(gen)

    def stream_chat(self, messages: Sequence[Message], params: SamplingParams | None = None,
                    **overrides: Unpack[SamplingOverrides]) -> Generation:
        """chat() as a stream of text pieces (see stream())."""
        return self._engine.start(self.chat_prompt(messages), self._params(params, overrides))

    def chat_prompt(self, messages: Sequence[Message]) -> list[int]:
        """The prompt tokens for `messages` through the model's chat template.

        Models without a template get a fallback chosen by their turn tokens (Gemma turns, ChatML or a plain
        "User:/Assistant:" transcript); the prompt starts with exactly one BOS where the model uses one.
        """
        _check_messages(messages)
        return self.tokenizer.apply_chat_template(messages, add_generation_prompt=True)

    # -- evaluation -----------------------------------------------------------------------------------
    def logits(self, tokens: Prompt) -> np.ndarray:
        """Teacher-forced logits [len(tokens), vocab]: row i predicts token i + 1 (for evaluation)."""
        ids = self._prompt_ids(tokens)
        with self._engine.lock:
            return np.concatenate(list(self._engine.eval_all(ids)), axis=0)

    def perplexity(self, text: str) -> float:
        """exp(mean negative log-likelihood) of `text`'s tokens, each predicted from the ones before.

        Text longer than the context is scored in consecutive windows of n_ctx tokens (each window's first
        token has no context and is not scored), as llama.cpp's perplexity tool does.
        """
        ids = self._prompt_ids(text)
        if len(ids) < 2:
            raise InvalidParameterError("perplexity needs a text of at least 2 tokens")
        nll, count = 0.0, 0
        with self._engine.lock:
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

    # -- helpers --------------------------------------------------------------------------------------
    def _prompt_ids(self, prompt: Prompt) -> list[int]:
        if isinstance(prompt, str):
            if not prompt:
                raise InvalidParameterError(
                    "the prompt is empty; pass some text (or, for unconditional generation, the token list "
                    "[llm.tokenizer.bos_id])")
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

    def _params(self, params: SamplingParams | None, overrides: Mapping[str, Any]) -> SamplingParams:
        merged = (params or self.defaults).with_overrides(**overrides)
        if merged.seed is None and self.defaults.seed is not None:
            merged = merged.with_overrides(seed=self.defaults.seed)
        return merged

    def _done(self, gen: Generation) -> GenerationResult:
        result = gen.result
        assert result is not None  # an exhausted, unclosed generation always has one
        if self.verbose:
            print(f"oxigpu: {result.timings.summary()} | finish: {result.finish_reason}", file=sys.stderr)
        return result


def load(model_path: str | Path | None = None, **kwargs: Any) -> LLM:
    """``LLM(model_path, **kwargs)``: the default model when no path is given."""
    return LLM(model_path, **kwargs)


def _check_messages(messages: Sequence[Message]) -> None:
    if isinstance(messages, (str, bytes)) or not messages:
        raise InvalidParameterError("messages must be a non-empty list of {'role': ..., 'content': ...} dicts")
    for i, m in enumerate(messages):
        if not isinstance(m, Mapping) or not isinstance(m.get("role"), str) or not isinstance(
                m.get("content"), str):
            raise InvalidParameterError(f"messages[{i}] must be a dict with string 'role' and 'content'")
