"""`Tokenizer`: a HuggingFace `tokenizers.Tokenizer` built from GGUF metadata, tokenizing like llama.cpp.

Encoding runs entirely in `tokenizers` (Rust). What we add is the translation of llama.cpp's algorithms
into a `tokenizers` pipeline, plus llama.cpp's detokenization (`token_to_piece`), which works on bytes:

* SentencePiece-style (`llama`): llama.cpp merges adjacent symbols greedily, highest-scoring resulting
  token first, leftmost on ties, then falls back to `<0xNN>` byte tokens. That is a BPE whose merge list is
  every (a, b) with a, b and a+b in the vocabulary, ranked by the score of a+b — built here from the vocab.
  Spaces become "▁" and, when `add_space_prefix`, every text fragment gets a leading "▁" (llama.cpp adds
  it to the first fragment and after each special token; `tokenizers` normalizes each fragment alone).
* byte-level BPE (`gpt2`): the file's merges, GPT-2 byte mapping, and the pre-tokenizer regexes llama.cpp
  uses for `tokenizer.ggml.pre`, applied in sequence.
* Control/unknown tokens are "special" added tokens (split out of the text only when `parse_special`),
  user-defined tokens are plain added tokens (always split out), matching llama.cpp's
  `tokenizer_st_partition`. Both match the raw (unnormalized) text.

Identical to llama.cpp on the fixture corpus for gemma3 and qwen2 (tests/test_tokenizer.py). Known
theoretical differences, none seen on real vocabularies: equal-score merges into different tokens are
ordered by id rather than by position; overlapping special tokens are matched leftmost-longest rather
than longest-first; a character missing from an SPM vocabulary is byte-encoded before it could merge.
"""
from __future__ import annotations

import codecs
import functools
import re
import threading
from collections.abc import Callable, Iterable, Iterator, Mapping, Sequence
from typing import Any

import numpy as np
from tokenizers import AddedToken, Regex, decoders, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from ..errors import ContextLengthError, InvalidParameterError, TemplateError, TokenizerError
from ..limits import MAX_MERGE_CHARS, MAX_MERGES
from .chat import ChatTemplate, fallback_template
from .vocab import Attr, Vocab, vocab_from_metadata

_SPECIAL = int(Attr.CONTROL | Attr.UNKNOWN)
_ADDED = _SPECIAL | int(Attr.USER_DEFINED)


def _gpt2_byte_decoder() -> dict[str, int]:
    """Inverse of GPT-2's bytes_to_unicode: printable bytes map to themselves, the rest to U+0100+."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    table, extra = {}, 0
    for b in range(256):
        if b in keep:
            table[chr(b)] = b
        else:
            table[chr(256 + extra)] = b
            extra += 1
    return table


_BYTE_DECODER = _gpt2_byte_decoder()


_HASH_BASE = 0x9E3779B97F4A7C15        # odd, so invertible modulo 2**64
_HASH_BASE_INV = pow(_HASH_BASE, -1, 1 << 64)
_SPLIT_CHUNK = 1 << 20                 # candidate splits tested at once (~100 MiB of temporaries)


def _spm_merges(vocab: Vocab) -> list[tuple[str, str]]:
    """Every split (t[:k], t[k:]) of a token t into two vocabulary tokens, ordered by t's score
    (descending; ties by id, then split point).

    A 262k vocabulary has ~1.2M candidate splits, too many for a Python loop within the build budget, so
    membership is tested in numpy on polynomial hashes (mod 2**64) of every substring: the hash of
    text[s:e] is (G[e] - G[s]) * BASE**-s with G the prefix sums of code[j] * BASE**j. A hash collision
    could only add a pair whose halves are not both tokens, which `tokenizers` rejects loudly.

    The merges are what a vocabulary costs most (their text grows with the square of token length), so
    candidates are tested in chunks (bounded temporaries) and the merges found are counted against
    MAX_MERGES and MAX_MERGE_CHARS before a single string is built.
    """
    tokens = vocab.tokens
    n = len(tokens)
    lengths = np.fromiter(map(len, tokens), np.int64, n)
    ends = np.cumsum(lengths)
    starts = ends - lengths
    total = int(ends[-1])
    codes = np.frombuffer("".join(tokens).encode("utf-32-le", "surrogatepass"), np.uint32)
    with np.errstate(over="ignore"):
        power = np.full(total + 1, _HASH_BASE, np.uint64)
        power[0] = 1
        inverse = np.full(total + 1, _HASH_BASE_INV, np.uint64)
        inverse[0] = 1
        power, inverse = np.cumprod(power), np.cumprod(inverse)
        prefix = np.zeros(total + 1, np.uint64)
        np.cumsum(codes * power[:total], out=prefix[1:])
        del power, codes
        known = np.sort((prefix[ends] - prefix[starts]) * inverse[starts])

    def member(h: np.ndarray) -> np.ndarray:
        return known[np.minimum(np.searchsorted(known, h), n - 1)] == h

    n_splits = np.maximum(lengths - 1, 0)
    first_split = np.cumsum(n_splits) - n_splits          # index of each token's first candidate
    hit_owner, hit_k = [], []
    found = chars = 0
    n_cand = int(n_splits.sum())
    for lo in range(0, n_cand, _SPLIT_CHUNK):   # candidates lo .. hi-1, in token order
        hi = min(lo + _SPLIT_CHUNK, n_cand)
        c = np.arange(lo, hi)
        owner = np.searchsorted(first_split, c, side="right") - 1   # the last token starting at or before c
        k = c - first_split[owner] + 1
        s = starts[owner]
        cut = s + k
        with np.errstate(over="ignore"):
            heads = (prefix[cut] - prefix[s]) * inverse[s]
            tails = (prefix[ends[owner]] - prefix[cut]) * inverse[cut]
        hit = np.flatnonzero(member(heads) & member(tails))
        found += hit.size
        chars += int(lengths[owner[hit]].sum())
        if found > MAX_MERGES or chars > MAX_MERGE_CHARS:
            raise TokenizerError(
                f"tokenizer.ggml.tokens derives {'over ' if hi < n_cand else ''}"
                f"{found} SentencePiece merges of {chars} characters, over the limits of {MAX_MERGES} "
                f"merges and {MAX_MERGE_CHARS} characters (oxigpu.limits.MAX_MERGES, MAX_MERGE_CHARS)")
        hit_owner.append(owner[hit])
        hit_k.append(k[hit])
    owners = np.concatenate(hit_owner) if hit_owner else np.zeros(0, np.int64)
    ks = np.concatenate(hit_k) if hit_k else np.zeros(0, np.int64)
    rank = np.empty(n, np.int64)
    rank[np.argsort(-vocab.scores, kind="stable")] = np.arange(n)
    order = np.lexsort((ks, rank[owners]))
    return [(t[:j], t[j:]) for t, j in zip(map(tokens.__getitem__, owners[order].tolist()), ks[order].tolist())]


def _build_hf(vocab: Vocab) -> HFTokenizer:
    """Assemble the `tokenizers` pipeline for this vocabulary (see the module docstring); anything it refuses
    is a TokenizerError."""
    try:
        return _assemble(vocab)
    except TokenizerError:
        raise
    except BaseException as e:   # tokenizers raises plain Exception, or a Rust panic (a BaseException: a merge
        if not _is_error(e):     # whose result is not a token, with multi-byte halves), for inconsistent input
            raise
        raise TokenizerError(f"the vocabulary cannot be built into a tokenizer: {type(e).__name__}: {e}") from None


def _is_error(e: BaseException) -> bool:
    """An Exception or a Rust panic from `tokenizers` (pyo3's PanicException derives from BaseException);
    not KeyboardInterrupt, SystemExit or a cancellation."""
    return isinstance(e, Exception) or type(e).__name__ == "PanicException"


def _assemble(vocab: Vocab) -> HFTokenizer:
    text_to_id = vocab.text_to_id
    if vocab.model == "llama":
        try:
            model = models.BPE(text_to_id, _spm_merges(vocab), byte_fallback=True,
                               unk_token=None if vocab.unk_id is None else vocab.tokens[vocab.unk_id])
        except Exception as e:   # tokenizers raises plain Exception for inconsistent merges
            raise TokenizerError(f"cannot build the SentencePiece-style merges: {e}") from None
        tok = HFTokenizer(model)
        norm = [normalizers.Replace(" ", "▁")]
        dec = [decoders.Replace("▁", " "), decoders.ByteFallback(), decoders.Fuse()]
        if vocab.add_space_prefix:
            norm.insert(0, normalizers.Prepend("▁"))
            dec.append(decoders.Strip(" ", 1, 0))
        tok.normalizer = normalizers.Sequence(norm)
        tok.decoder = decoders.Sequence(dec)
    else:
        assert vocab.merges is not None and vocab.pre is not None
        merges = [(m[:cut], m[cut + 1:]) for m in vocab.merges if (cut := m.find(" ", 1)) > 0]
        bad = next((i for i, (a, b) in enumerate(merges) if a + b not in text_to_id), None)
        if bad is not None:   # tokenizers would panic on some of these (multi-byte halves)
            raise TokenizerError(f"tokenizer.ggml.merges[{bad}] {' '.join(merges[bad])!r} makes a token that is not "
                                 f"in the vocabulary")
        try:
            tok = HFTokenizer(models.BPE(text_to_id, merges, ignore_merges=vocab.pre.ignore_merges))
        except Exception as e:   # e.g. a merge naming a token that is not in the vocabulary
            raise TokenizerError(f"tokenizer.ggml.merges is inconsistent with the vocabulary: {e}") from None
        tok.pre_tokenizer = pre_tokenizers.Sequence(
            [pre_tokenizers.Split(Regex(r), behavior="isolated") for r in vocab.pre.regexes]
            + [pre_tokenizers.ByteLevel(add_prefix_space=False, use_regex=False)])
        tok.decoder = decoders.ByteLevel()

    ids = np.flatnonzero(vocab.attrs & _ADDED).tolist()
    tok.add_tokens([AddedToken(vocab.tokens[i], special=bool(vocab.attrs[i] & _SPECIAL), normalized=False)
                    for i in ids])

    single, special = "$A", []
    if vocab.add_bos:
        if vocab.bos_id is None:
            raise TokenizerError("tokenizer.ggml.add_bos_token is set but the vocabulary has no BOS token")
        single = f"{vocab.tokens[vocab.bos_id]} {single}"
        special.append((vocab.tokens[vocab.bos_id], vocab.bos_id))
    if vocab.add_eos:
        if vocab.eos_id is None:
            raise TokenizerError("tokenizer.ggml.add_eos_token is set but the vocabulary has no EOS token")
        single = f"{single} {vocab.tokens[vocab.eos_id]}"
        special.append((vocab.tokens[vocab.eos_id], vocab.eos_id))
    if special:
        tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=special)
    return tok


_PRIVATE_USE = re.compile("[\U000F0000-\U0010FFFF]")   # planes 15-16: the sentinels' range


def _strings(value: Any, visit: Callable[[str], None]) -> None:
    """Call `visit` on every string inside `value` (lists, tuples and dict values, nested)."""
    if isinstance(value, str):
        visit(value)
    elif isinstance(value, Mapping):
        for v in value.values():
            _strings(v, visit)
    elif isinstance(value, (list, tuple)):
        for v in value:
            _strings(v, visit)


class Tokenizer:
    """Encode/decode exactly like llama.cpp for a GGUF vocabulary. Build with `Tokenizer.from_metadata`."""

    def __init__(self, vocab: Vocab, hf: HFTokenizer):
        self._vocab = vocab
        self._hf = hf
        self._pieces: list[bytes | None] = [None] * len(vocab.tokens)
        self._lock = threading.Lock()   # encode toggles hf.encode_special_tokens per call
        self._chat: ChatTemplate | None = None
        self._chat_override: str | None = None

    @classmethod
    def from_metadata(cls, metadata: Mapping[str, Any]) -> Tokenizer:
        """Build from a GGUF metadata mapping (`GGUFFile(path).metadata`)."""
        if isinstance(model := metadata.get("tokenizer.ggml.model"), str) and model == "bert":
            from .wordpiece import build_wordpiece, wordpiece_vocab
            vocab = wordpiece_vocab(metadata)
            return cls(vocab, build_wordpiece(vocab))
        vocab = vocab_from_metadata(metadata)
        return cls(vocab, _build_hf(vocab))

    # -- properties -------------------------------------------------------------------------------------
    @property
    def hf(self) -> HFTokenizer:
        """The underlying `tokenizers.Tokenizer` (its `encode_special_tokens` flag is ours to toggle)."""
        return self._hf

    @property
    def model(self) -> str:
        """"llama" (SentencePiece-style) or "gpt2" (byte-level BPE)."""
        return self._vocab.model

    @property
    def vocab_size(self) -> int:
        return len(self._vocab.tokens)

    @property
    def bos_id(self) -> int | None:
        return self._vocab.bos_id

    @property
    def eos_id(self) -> int | None:
        return self._vocab.eos_id

    @property
    def eot_id(self) -> int | None:
        """End-of-turn token: `tokenizer.ggml.eot_token_id`, else the first of llama.cpp's known texts."""
        return self._vocab.eot_id

    @property
    def eog_ids(self) -> frozenset[int]:
        """Every id that ends generation (EOS, EOT, EOM, FIM pad/repo/sep and llama.cpp's known texts)."""
        return self._vocab.eog_ids

    @property
    def add_bos(self) -> bool:
        return self._vocab.add_bos

    @property
    def chat_template(self) -> str | None:
        """The chat template in use: one set by `set_chat_template`, else `tokenizer.chat_template` from the
        file; None when the model has none (chat then uses `fallback_template`)."""
        return self._chat_override or self._vocab.chat_template

    @property
    def chat(self) -> ChatTemplate:
        """The chat template (see `chat_template`), or `fallback_template` for this vocabulary; compiled on
        first use (so a malformed template raises TemplateError here, not when the model loads)."""
        if self._chat is None:
            own = self.chat_template   # not checked at load: a template of the wrong type fails here, in chat
            self._chat = self._compile(fallback_template(self._vocab.text_to_id)
                                       if own is None or isinstance(own, str) and not own else own)
        return self._chat

    def set_chat_template(self, source: str) -> None:
        """Use the jinja2 template `source` instead of the file's (same sandbox and budgets). It is compiled
        at once, so a malformed template raises TemplateError here rather than at the first chat."""
        self._chat = self._compile(source)
        self._chat_override = source

    def _compile(self, source: str) -> ChatTemplate:
        v = self._vocab
        return ChatTemplate(source, bos_token="" if v.bos_id is None else v.tokens[v.bos_id],
                            eos_token="" if v.eos_id is None else v.tokens[v.eos_id])

    @functools.cached_property
    def max_token_chars(self) -> int:
        """Most characters of text one token can stand for (its text's length): a text of n characters
        needs at least n / max_token_chars tokens, known before tokenizing it."""
        return max(1, max(map(len, self._vocab.tokens)))

    def check_fits(self, text: str, max_tokens: int, what: str = "the prompt") -> None:
        """ContextLengthError, decided from `text`'s length alone (no tokenization), when it needs more than
        `max_tokens` tokens."""
        if isinstance(text, str) and len(text) > max_tokens * self.max_token_chars:
            at_least = -(-len(text) // self.max_token_chars)
            raise ContextLengthError(
                f"{what} has {len(text)} characters, so at least {at_least} tokens (no token of this vocabulary "
                f"stands for more than {self.max_token_chars} characters), more than the {max_tokens} that fit; "
                f"shorten it or raise n_ctx")

    def apply_chat_template(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
                            tools: Sequence[Mapping[str, Any]] | None = None, *,
                            parse_special_in_messages: bool = False, max_tokens: int | None = None,
                            **extra: Any) -> list[int]:
        """Render `messages` and tokenize the prompt: the template's own markup with special-token parsing,
        the messages' text as plain text. Templates usually write `bos_token` themselves; it is dropped
        from the text when encoding adds BOS anyway, so the prompt starts with exactly one BOS (what
        llama.cpp's chat code does).

        Turn integrity: a control-token string typed inside a message (``<|im_end|>``, ``<end_of_turn>``)
        stays text, so a user cannot close their turn and open a fake system or assistant turn. Every
        string in `messages` and `tools` has its special-token occurrences swapped for private-use
        sentinel characters before rendering; the rendered text is split at the template's special tokens
        (found as the tokenizer finds them), and each piece between them, the sentinels turned back into
        the strings they stand for, is tokenized without special parsing. `parse_special_in_messages=True`
        parses them as control tokens (llama.cpp's behaviour, for callers who build turns themselves).
        `max_tokens`: a rendered prompt that cannot fit in that many tokens is refused before tokenizing
        (`check_fits`).
        """
        sentinels: dict[str, str] = {}
        if not parse_special_in_messages:
            taken = set(_PRIVATE_USE.findall(self.chat.source + self.chat.bos_token + self.chat.eos_token))
            _strings((messages, tools, extra), lambda t: taken.update(_PRIVATE_USE.findall(t)))
            messages, tools = self._protect((messages, tools), sentinels, taken)
        text = self.chat.render(messages, add_generation_prompt=add_generation_prompt, tools=tools, **extra)
        bos = self.chat.bos_token
        if self.add_bos and bos and text.startswith(bos):
            text = text[len(bos):]
        if max_tokens is not None:
            self.check_fits(text, max_tokens, "the rendered chat prompt")
        if not sentinels:
            return self.encode(text, add_special=True, parse_special=True)
        return self._encode_protected(text, sentinels)

    def _protect(self, value: Any, sentinels: dict[str, str], taken: set[str]) -> Any:
        """`value` with every special-token string inside its strings (nested in lists, tuples and dicts;
        dict keys are left alone) replaced by a sentinel character not in `taken`; `sentinels` maps each
        sentinel back to its string."""
        if isinstance(value, str):
            found = self._specials_in(value)
            if not found:
                return value
            by_text = {t: c for c, t in sentinels.items()}
            out, last = [], 0
            for start, end, _ in found:
                special = value[start:end]
                if special not in by_text:
                    code = 0xF0000
                    while chr(code) in taken:
                        code += 1
                    if code > 0x10FFFD:
                        raise TemplateError("too many distinct control-token strings in the messages")
                    by_text[special] = chr(code)
                    sentinels[chr(code)] = special
                    taken.add(chr(code))
                out += [value[last:start], by_text[special]]
                last = end
            return "".join(out) + value[last:]
        if isinstance(value, Mapping):
            return {k: self._protect(v, sentinels, taken) for k, v in value.items()}
        if isinstance(value, (list, tuple)):
            return type(value)(self._protect(v, sentinels, taken) for v in value)
        return value

    @functools.cached_property
    def _added_pattern(self) -> re.Pattern[str]:
        """A regex matching this vocabulary's added tokens (control, unknown and user-defined) as encoding
        splits them out: leftmost-longest over all of them. Built as a trie (shared prefixes factored,
        longer continuations tried first), so a scan costs about one step per character whatever the
        number of tokens; `tokenizers` itself would run its whole pipeline over the text."""
        v = self._vocab
        texts = [v.tokens[i] for i in np.flatnonzero(v.attrs & _ADDED).tolist()]
        trie: dict[str, Any] = {}
        for text in texts:
            node = trie
            for ch in text:
                node = node.setdefault(ch, {})
            node[""] = True

        def pattern(node: dict[str, Any]) -> str:
            branches = []
            for ch, child in node.items():
                if not ch:
                    continue
                run = ch            # a chain of single-child, non-final nodes is one literal
                while len(child) == 1 and "" not in child:
                    (ch, child), = child.items()
                    run += ch
                branches.append(re.escape(run) + pattern(child))
            if not branches:
                return ""
            alt = branches[0] if len(branches) == 1 else "(?:" + "|".join(branches) + ")"
            return f"(?:{alt})?" if "" in node else alt
        try:
            return re.compile(pattern(trie) or "(?!)")
        except (RecursionError, re.error):   # tokens nested hundreds deep: a flat alternation, longest first
            return re.compile("|".join(map(re.escape, sorted(set(texts), key=len, reverse=True))) or "(?!)")

    def _specials_in(self, text: str) -> list[tuple[int, int, int]]:
        """(start, end, id) of each control-token string in `text`, as encoding with special parsing finds
        them (user-defined tokens take part in the leftmost-longest split but are not reported)."""
        if not text:
            return []
        to_id, attrs = self._vocab.text_to_id, self._vocab.attrs
        found = ((m.start(), m.end(), to_id[m.group()]) for m in self._added_pattern.finditer(text))
        return [f for f in found if attrs[f[2]] & _SPECIAL]

    def _encode_protected(self, text: str, sentinels: dict[str, str]) -> list[int]:
        """Tokens of `text`: its special tokens (the template's: the messages' were swapped for sentinels)
        as ids, the pieces between them, sentinels restored, as plain text; BOS/EOS as `encode` adds them."""
        restore = str.maketrans(sentinels)
        ids: list[int] = []
        last = 0
        for start, end, token in self._specials_in(text):
            ids += self._plain(text[last:start].translate(restore))
            ids.append(token)
            last = end
        ids += self._plain(text[last:].translate(restore))
        v = self._vocab
        return ([v.bos_id] if v.add_bos and v.bos_id is not None else []) + ids + \
            ([v.eos_id] if v.add_eos and v.eos_id is not None else [])

    def _plain(self, text: str) -> list[int]:
        return self.encode(text, add_special=False, parse_special=False) if text else []

    def token_text(self, token_id: int) -> str:
        """The vocabulary entry as stored in the file (e.g. "▁the", "Ġthe", "<0x0A>")."""
        return self._vocab.tokens[self._check(token_id)]

    def has_token(self, text: str) -> bool:
        return self._hf.token_to_id(text) is not None

    # -- encoding ---------------------------------------------------------------------------------------
    def encode(self, text: str, add_special: bool = True, parse_special: bool = True) -> list[int]:
        """Token ids for `text`. add_special: BOS/EOS as the file asks; parse_special: control-token
        strings in the text become their ids (user-defined tokens always do, as in llama.cpp)."""
        try:
            with self._lock:
                self._hf.encode_special_tokens = not parse_special
                return self._hf.encode(text, add_special_tokens=add_special).ids
        except BaseException as e:
            if not _is_error(e):
                raise
            if not isinstance(e, TypeError):   # a Rust panic on a hostile vocabulary: never a raw exception
                raise TokenizerError(f"tokenizing failed: {type(e).__name__}: {e}") from None
            if not isinstance(text, str):
                raise InvalidParameterError(f"text to tokenize must be a str, got {type(text).__name__}") from None
            bad = next((i for i, c in enumerate(text) if 0xD800 <= ord(c) <= 0xDFFF), None)
            if bad is None:
                raise
            raise InvalidParameterError(
                f"the text holds a lone surrogate U+{ord(text[bad]):04X} at index {bad}, which is not valid "
                f"Unicode (decode bytes with errors='replace' first)") from None

    # -- decoding ---------------------------------------------------------------------------------------
    def _check(self, token_id: int) -> int:
        i = int(token_id)
        if not 0 <= i < len(self._vocab.tokens):
            raise TokenizerError(f"token id {token_id} is outside the vocabulary (size {self.vocab_size})")
        return i

    def token_to_piece(self, token_id: int, special: bool = True) -> bytes:
        """The bytes llama.cpp's `token_to_piece` gives: may be part of a UTF-8 character (byte tokens).
        With special=False, control and unknown tokens render as b""."""
        i = self._check(token_id)
        attr = int(self._vocab.attrs[i])
        if not special and attr & _SPECIAL:
            return b""
        piece = self._pieces[i]
        if piece is None:
            piece = self._pieces[i] = self._render(i, attr)
        return piece

    def _render(self, i: int, attr: int) -> bytes:
        text = self._vocab.tokens[i]
        if attr & _ADDED:
            return text.encode()
        if attr & Attr.NORMAL:
            if self._vocab.model in ("llama", "bert"):
                return text.replace("▁", " ").encode()
            return b"".join(bytes((_BYTE_DECODER[c],)) if c in _BYTE_DECODER else c.encode() for c in text)
        if attr & Attr.BYTE and len(text) == 6 and text.startswith("<0x") and text.endswith(">"):
            return bytes((int(text[3:5], 16),))
        return b""   # unused / undefined tokens render as nothing, as in llama.cpp

    def _pieces_of(self, ids: Iterable[int], special: bool, first: bool) -> Iterator[bytes]:
        """Pieces with llama_detokenize's rule: with add_space_prefix, the first piece loses one leading
        space (the one encoding added). If the first token is BOS it has no space to lose, so the text
        keeps its space, exactly as in llama.cpp."""
        for token_id in ids:
            piece = self.token_to_piece(token_id, special)
            if first and self._vocab.add_space_prefix and piece.startswith(b" "):
                piece = piece[1:]
            first = False
            yield piece

    def decode(self, ids: Iterable[int], skip_special: bool = False) -> str:
        """Text for `ids` (llama_detokenize with remove_special=False); invalid UTF-8 becomes U+FFFD.
        No clean-up of spaces before punctuation: decode(encode(s)) == s where the vocabulary allows."""
        return b"".join(self._pieces_of(ids, not skip_special, True)).decode("utf-8", "replace")

    def stream(self, skip_special: bool = False) -> StreamDecoder:
        """A fresh incremental decoder for one generated sequence."""
        return StreamDecoder(self, skip_special)


class StreamDecoder:
    """Feed ids one at a time; get text that never splits a UTF-8 character.

    Bytes of an incomplete character are held back until the rest arrives; `flush()` ends the stream
    (a still-incomplete tail becomes U+FFFD). The pieces concatenate to `tokenizer.decode(ids)`.
    """

    def __init__(self, tokenizer: Tokenizer, skip_special: bool = False):
        self._tok = tokenizer
        self._special = not skip_special
        self._utf8 = codecs.getincrementaldecoder("utf-8")("replace")
        self._first = True

    def feed(self, token_id: int) -> str:
        piece = b"".join(self._tok._pieces_of((token_id,), self._special, self._first))
        self._first = False
        return self._utf8.decode(piece)

    def flush(self) -> str:
        return self._utf8.decode(b"", final=True)
