"""WordPiece (`tokenizer.ggml.model = "bert"`) as llama.cpp runs it (``llm_tokenizer_wpm``).

A GGUF WordPiece vocabulary marks word-initial pieces with a leading "▁" and stores continuation pieces
bare (the converter turns BERT's "word"/"##ing" into "▁word"/"ing"). llama.cpp lower-cases and strips
accents (NFD, marks dropped) unless the file says otherwise, splits on whitespace and makes every
punctuation character (and ASCII symbol, and CJK ideograph) a word of its own, then takes the longest
vocabulary piece from the left of each word; a word with any unmatched remainder becomes [UNK]. Encoding
adds [CLS] before and [SEP] after.

That is exactly `tokenizers`' BertNormalizer + BertPreTokenizer + WordPiece once the vocabulary is written
back in BERT's spelling ("▁word" -> "word", "ing" -> "##ing"), which is what we build.
"""
from __future__ import annotations

from collections.abc import Mapping
from typing import Any

import numpy as np
from tokenizers import AddedToken, models, normalizers, pre_tokenizers, processors
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
    pieces: dict[str, int] = {}
    added = np.flatnonzero(v.attrs & (_SPECIAL | int(Attr.USER_DEFINED))).tolist()
    for i, t in enumerate(v.tokens):
        bert = t[1:] if t.startswith(_PHANTOM) else "##" + t
        pieces.setdefault(bert, i)    # the first id wins for a text, as llama.cpp's lookup does
    unk = v.tokens[v.unk_id]
    pieces[unk] = v.unk_id
    tok = HFTokenizer(models.WordPiece(pieces, unk_token=unk, max_input_chars_per_word=1 << 30))
    tok.normalizer = normalizers.BertNormalizer(clean_text=True, handle_chinese_chars=True,
                                                strip_accents=v.strip_accents, lowercase=v.lowercase)
    tok.pre_tokenizer = pre_tokenizers.BertPreTokenizer()
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
