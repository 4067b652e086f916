"""WordPiece (`tokenizer.ggml.model = "bert"`) as llama.cpp runs it (``llm_tokenizer_wpm``).

A GGUF WordPiece vocabulary marks word-initial pieces with a leading "▁" and stores continuation pieces
bare (the converter turns BERT's "word"/"##ing" into "▁word"/"ing"). llama.cpp drops control characters,
and unless the file says otherwise strips accents and lower-cases, splits on whitespace and makes every
punctuation character (and ASCII symbol, and CJK ideograph) a word of its own, then takes the longest
vocabulary piece from the left of each word; a word with any unmatched remainder becomes [UNK]. Encoding
adds [CLS] before and [SEP] after.

Its accent stripping is not Unicode NFD: each code point is replaced by the first code point of its
decomposition (so a Hangul syllable keeps only its leading consonant), then every mark (category M, spacing
marks too) is dropped. `tokenizers`' BertNormalizer differs there, so the normalizer is our own (one
character in, at most one out). Words are split by `tokenizers`, then each gets the phantom "▁" in front
(our pre-tokenizer step), and `tokenizers`' WordPiece runs on the file's own vocabulary with no
continuation prefix: the first piece of a word is looked up with its "▁", the rest bare, as in llama.cpp.
"""
from __future__ import annotations

import unicodedata
from collections.abc import Mapping
from functools import lru_cache
from typing import Any

import numpy as np
from tokenizers import AddedToken, NormalizedString, Regex, models, normalizers, pre_tokenizers, processors
from tokenizers import Tokenizer as HFTokenizer

from ..errors import TokenizerError
from .vocab import Attr, Vocab, vocab_from_metadata

_PHANTOM = "▁"
_SPECIAL = int(Attr.CONTROL | Attr.UNKNOWN)


def wordpiece_vocab(md: Mapping[str, Any]) -> Vocab:
    """The `Vocab` of a "bert" tokenizer: llama.cpp's defaults ([CLS] 101 as BOS, [SEP] 102, [UNK] 100,
    [PAD] 0) unless the file names other ids; no EOS; lower-casing per tokenizer.ggml.normalizer.*."""
    # Everything but the model-specific defaults is what the other vocabularies read: reuse that reader
    # on a "llama"-typed view of the metadata, then set WordPiece's own ids and flags.
    view = {**md, "tokenizer.ggml.model": "llama"}
    v = vocab_from_metadata(view)
    n = len(v.tokens)

    def tid(key: str, default: int | None) -> int | None:
        x = md.get(f"tokenizer.ggml.{key}")
        if x is None:
            return default if default is not None and default < n else None
        if isinstance(x, (bool, np.bool_)) or not isinstance(x, (int, np.integer)) or not 0 <= int(x) < n:
            raise TokenizerError(f"tokenizer.ggml.{key} must be a token id below {n}, got {x!r}")
        return int(x)

    v.model = "bert"
    v.bos_id = tid("bos_token_id", 101)
    v.eos_id = tid("eos_token_id", None)
    v.unk_id = tid("unknown_token_id", 100)
    v.sep_id = tid("seperator_token_id", 102)       # (sic) llama.cpp's key spelling
    v.add_bos = _flag(md, "tokenizer.ggml.add_bos_token", True)
    v.add_eos = _flag(md, "tokenizer.ggml.add_eos_token", False)
    v.add_space_prefix = False
    v.lowercase = _flag(md, "tokenizer.ggml.normalizer.lowercase", True)
    v.strip_accents = _flag(md, "tokenizer.ggml.normalizer.strip_accents", v.lowercase)
    v.eog_ids = frozenset(i for i in (v.eos_id, v.sep_id) if i is not None)
    if v.unk_id is None:
        raise TokenizerError("a 'bert' tokenizer needs an unknown token (tokenizer.ggml.unknown_token_id)")
    return v


def _flag(md: Mapping[str, Any], key: str, default: bool) -> bool:
    x = md.get(key)
    if x is None:
        return default
    if not isinstance(x, (bool, np.bool_, int, np.integer)):
        raise TokenizerError(f"{key} must be a bool, got {x!r}")
    return bool(x)


def build_wordpiece(v: Vocab) -> HFTokenizer:
    """The `tokenizers` pipeline for a WordPiece `Vocab` (see the module docstring)."""
    pieces = {t: i for i, t in reversed(list(enumerate(v.tokens)))}   # the first id wins for a text
    added = np.flatnonzero(v.attrs & (_SPECIAL | int(Attr.USER_DEFINED))).tolist()
    unk = v.tokens[v.unk_id]
    tok = HFTokenizer(models.WordPiece(pieces, unk_token=unk, continuing_subword_prefix="",
                                       max_input_chars_per_word=1 << 30))
    tok.normalizer = normalizers.Normalizer.custom(_WpmNormalizer(v.strip_accents, v.lowercase))
    tok.pre_tokenizer = pre_tokenizers.Sequence([
        pre_tokenizers.WhitespaceSplit(), pre_tokenizers.Split(Regex(_ISOLATED), behavior="isolated"),
        pre_tokenizers.PreTokenizer.custom(_Phantom())])
    tok.add_tokens([AddedToken(v.tokens[i], special=bool(v.attrs[i] & _SPECIAL), normalized=False) for i in added])
    single, special = "$A", []
    if v.add_bos and v.bos_id is not None:
        single = f"{v.tokens[v.bos_id]} {single}"
        special.append((v.tokens[v.bos_id], v.bos_id))
    if v.sep_id is not None:
        single = f"{single} {v.tokens[v.sep_id]}"
        special.append((v.tokens[v.sep_id], v.sep_id))
    if special:
        tok.post_processor = processors.TemplateProcessing(single=single, special_tokens=special)
    return tok


# Characters that are words of their own: punctuation, ASCII symbols, CJK ideographs (llama.cpp's ranges).
_ISOLATED = (r"\p{P}|[$+<=>^`|~]|[\x{4E00}-\x{9FFF}\x{3400}-\x{4DBF}\x{F900}-\x{FAFF}"
             r"\x{20000}-\x{2A6DF}\x{2A700}-\x{2B81F}\x{2B920}-\x{2CEAF}\x{2F800}-\x{2FA1F}]")


@lru_cache(maxsize=1 << 16)
def _base(c: str) -> str:
    """llama.cpp's per-code-point "NFD": the first code point of the canonical decomposition."""
    return unicodedata.normalize("NFD", c)[0]


@lru_cache(maxsize=1 << 16)
def _lower(c: str) -> str:
    low = c.lower()
    return low if len(low) == 1 else c


def _dropped(c: str) -> bool:
    """Control characters (whitespace aside: it separates words), NUL and U+FFFD."""
    return c in ("\0", "\ufffd") or (unicodedata.category(c)[0] == "C" and not c.isspace())


class _WpmNormalizer:
    """llama.cpp's WordPiece preprocessing up to word splitting (see the module docstring)."""

    def __init__(self, strip_accents: bool, lowercase: bool):
        self.strip_accents, self.lowercase = strip_accents, lowercase

    def normalize(self, normalized: NormalizedString) -> None:
        normalized.filter(lambda c: not _dropped(c))
        if self.strip_accents:
            normalized.map(_base)
            normalized.filter(lambda c: unicodedata.category(c)[0] != "M")
        if self.lowercase:
            normalized.map(_lower)


class _Phantom:
    """Prepends "▁" to every word, as llama.cpp does before matching its first piece."""

    @staticmethod
    def _prepend(_i: int, word: NormalizedString) -> list[NormalizedString]:
        word.prepend(_PHANTOM)
        return [word]

    def pre_tokenize(self, pretok) -> None:
        pretok.split(self._prepend)
