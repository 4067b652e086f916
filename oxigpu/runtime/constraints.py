"""Structured output: JSON, JSON Schema, grammars (GBNF or Lark) and regexes, enforced token by token.

`llguidance <https://github.com/guidance-ai/llguidance>`_ (the Rust engine behind llama.cpp's and others'
structured output) compiles the constraint against the model's vocabulary, given to it as the byte string
of every token. Before each draw it computes the set of tokens that keep the output a prefix of some
string the constraint accepts, as a bitmask (u32 words, bit ``t % 32`` of word ``t // 32`` set = token
``t`` allowed: the layout the samplers take, numpy twin and GPU alike); after the draw it consumes the token.
End-of-generation tokens are allowed exactly when the output so far is complete.

A constraint is compiled once per request, before generation starts, and every problem with it is an
:class:`InvalidParameterError` then (invalid JSON Schema, grammar or regex; an unsatisfiable schema such as
``minimum > maximum``; a grammar that admits no first token).

An output cut by ``max_tokens`` (finish reason "length") is a prefix of a valid output, not a valid one:
give the budget room for the longest output the schema allows (bound strings and arrays with
``maxLength`` / ``maxItems`` where that matters). JSON is generated compact (no free whitespace), so a
schema with bounded strings, arrays and numbers has a bounded output.
"""
from __future__ import annotations

import json
import threading
import weakref
from collections.abc import Mapping
from dataclasses import dataclass
from typing import TYPE_CHECKING, Any

import numpy as np

from ..errors import InvalidParameterError

if TYPE_CHECKING:
    from ..tokenizer import Tokenizer
    from .params import SamplingParams

_LL_TOKENIZERS: weakref.WeakKeyDictionary[Any, dict[int, Any]] = weakref.WeakKeyDictionary()
_LOCK = threading.Lock()


def _llguidance() -> Any:
    try:
        import llguidance
    except ImportError as e:    # a core dependency; only a broken install lacks it
        raise InvalidParameterError(f"structured output needs the llguidance package ({e}); "
                                    f"pip install llguidance") from None
    return llguidance


class _Vocab:
    """The model's vocabulary as llguidance's TokenizerWrapper wants it: every token's bytes (control
    tokens as 0xFF + their text, so grammars can name them but text never matches them), the
    end-of-generation ids, and a tokenize function (used for forced bytes)."""

    def __init__(self, tokenizer: Tokenizer, n_vocab: int):
        self.tokens: list[bytes] = []
        self.special_token_ids: list[int] = []
        for i in range(n_vocab):
            if i >= tokenizer.vocab_size:
                self.tokens.append(b"")
                continue
            plain = tokenizer.token_to_piece(i, special=False)
            full = tokenizer.token_to_piece(i, special=True)
            if not plain and full:
                self.tokens.append(b"\xff" + full)
                self.special_token_ids.append(i)
            else:
                self.tokens.append(plain)
        eog = sorted(t for t in tokenizer.eog_ids if t < n_vocab)
        eos = tokenizer.eos_id
        self.eos_token_id = eos if eos is not None and eos < n_vocab else (eog[0] if eog else 0)
        self.eog_ids = eog or [self.eos_token_id]
        self.bos_token_id = tokenizer.bos_id
        self._tokenizer = tokenizer

        self._by_bytes = {b: i for i, b in enumerate(self.tokens) if b and i not in set(self.special_token_ids)}
        self._longest = max(map(len, self._by_bytes), default=1)

    def __call__(self, text: str | bytes) -> list[int]:
        """Token ids whose bytes are exactly ``text``: the model's tokenization when it is (a
        SentencePiece vocabulary adds a leading space, which llguidance must not see), else a greedy
        longest match over the vocabulary."""
        raw = text if isinstance(text, bytes) else text.encode()
        ids = self._tokenizer.encode(raw.decode("utf-8", "replace"), add_special=False, parse_special=False)
        if b"".join(self.tokens[i] for i in ids if i < len(self.tokens)) == raw:
            return ids
        out, pos = [], 0
        while pos < len(raw):
            for n in range(min(self._longest, len(raw) - pos), 0, -1):
                tok = self._by_bytes.get(raw[pos:pos + n])
                if tok is not None:
                    out.append(tok)
                    pos += n
                    break
            else:
                pos += 1            # a byte no token holds cannot be produced at all
        return out


def ll_tokenizer(tokenizer: Tokenizer, n_vocab: int) -> Any:
    """llguidance's tokenizer for this vocabulary (built once per Tokenizer: ~1 s on a 150k vocabulary)."""
    llg = _llguidance()
    with _LOCK:
        per = _LL_TOKENIZERS.setdefault(tokenizer, {})
        if n_vocab not in per:
            vocab = _Vocab(tokenizer, n_vocab)
            per[n_vocab] = llg.LLTokenizer(llg.TokenizerWrapper(vocab), n_vocab=n_vocab, eos_token=vocab.eog_ids)
        return per[n_vocab]


@dataclass(frozen=True)
class Constraint:
    """A compiled constraint (llguidance grammar text) for one vocabulary; :meth:`start` gives the state of
    one generation."""

    kind: str          # "json", "json_schema", "grammar", "regex"
    grammar: str       # llguidance's serialized grammar
    tokenizer: Any     # llguidance's LLTokenizer
    n_vocab: int

    @classmethod
    def from_params(cls, params: SamplingParams, tokenizer: Tokenizer, n_vocab: int) -> Constraint | None:
        """The constraint ``params`` asks for (None if none), compiled and checked: InvalidParameterError
        for an invalid or unsatisfiable one."""
        if not params.constrained:
            return None
        llg = _llguidance()
        if params.json:
            kind, text = "json", llg.LLMatcher.grammar_from_json_schema({"type": "object"})
        elif params.json_schema is not None:
            kind, text = "json_schema", _schema_grammar(llg, params.json_schema)
        elif params.grammar is not None:
            kind, text = "grammar", _grammar_text(llg, params.grammar)
        else:
            kind, text = "regex", llg.LLMatcher.grammar_from_regex(params.regex)
        tok = ll_tokenizer(tokenizer, n_vocab)
        error = llg.LLMatcher.validate_grammar(text, tok)
        if error and not error.startswith("WARNING"):
            raise InvalidParameterError(f"invalid {kind.replace('_', ' ')}: {_one_line(error)}")
        c = cls(kind, text, tok, n_vocab)
        c.start()           # a matcher that cannot start (no first token) fails here, before generation
        return c

    def start(self) -> ConstraintState:
        """A fresh state at the start of the output."""
        llg = _llguidance()
        m = llg.LLMatcher(self.tokenizer, self.grammar, log_level=0)
        if m.is_error():
            raise InvalidParameterError(f"invalid {self.kind.replace('_', ' ')}: {_one_line(m.get_error())}")
        state = ConstraintState(m, self)
        if not state.mask().any():
            raise InvalidParameterError(f"the {self.kind.replace('_', ' ')} admits no output with this "
                                        f"model's vocabulary")
        return state


class ConstraintState:
    """Where one generation stands in its constraint: the mask for the next token, and tokens consumed."""

    def __init__(self, matcher: Any, constraint: Constraint):
        self._m = matcher
        self.constraint = constraint
        self._mask: np.ndarray | None = None

    def mask(self) -> np.ndarray:
        """The allowed tokens for the next draw (uint32 [ceil(n_vocab / 32)]; computed once per step)."""
        if self._mask is None:
            words = -(-self.constraint.n_vocab // 32)
            raw = np.frombuffer(self._m.compute_bitmask(), np.uint32)
            mask = np.zeros(words, np.uint32)
            mask[:min(words, raw.size)] = raw[:words]
            self._mask = mask
        return self._mask

    def consume(self, token: int) -> None:
        """Advance past ``token`` (a draw under :meth:`mask` is always allowed; anything else is a bug)."""
        self._mask = None
        if not self._m.consume_token(int(token)):
            raise InvalidParameterError(f"token {token} does not continue the constraint: "
                                        f"{_one_line(self._m.get_error())}")

    def forced(self) -> list[int]:
        """The tokens that must come next whatever is drawn (possibly none), consumed."""
        ff = [int(t) for t in self._m.compute_ff_tokens()]
        if ff:
            self._mask = None
            if not self._m.consume_tokens(ff):
                raise InvalidParameterError(f"forced tokens {ff} do not continue the constraint: "
                                            f"{_one_line(self._m.get_error())}")
        return ff

    @property
    def accepting(self) -> bool:
        """Whether the output so far is complete (an end-of-generation token is allowed)."""
        return self._m.is_accepting()

    @property
    def stopped(self) -> bool:
        """Whether nothing but end-of-generation can follow."""
        return self._m.is_stopped()


def _schema_grammar(llg: Any, schema: Mapping[str, Any] | str) -> str:
    if isinstance(schema, str):
        try:
            schema = json.loads(schema)
        except json.JSONDecodeError as e:
            raise InvalidParameterError(f"json_schema is not valid JSON: {e}") from None
    if not isinstance(schema, Mapping):
        raise InvalidParameterError(f"json_schema must be a JSON object, got {type(schema).__name__}")
    try:
        return llg.LLMatcher.grammar_from_json_schema(dict(schema),
                                                      overrides={"whitespace_flexible": False})
    except (ValueError, TypeError) as e:
        raise InvalidParameterError(f"invalid json schema: {_one_line(str(e))}") from None


def _grammar_text(llg: Any, grammar: str) -> str:
    """GBNF (llama.cpp's ``rule ::= ...``) or Lark (llguidance's native syntax) to llguidance's grammar."""
    try:
        if "::=" in grammar:
            return llg.grammar_from("gbnf", grammar)
        return llg.LLMatcher.grammar_from_lark(grammar)
    except (ValueError, TypeError) as e:
        raise InvalidParameterError(f"invalid grammar: {_one_line(str(e))}") from None


def _one_line(text: str) -> str:
    return " ".join(str(text).split())[:500]
