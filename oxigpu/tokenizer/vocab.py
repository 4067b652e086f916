"""GGUF tokenizer metadata -> a `Vocab`: token texts, llama.cpp token attributes, special ids, flags.

Everything here mirrors llama.cpp's `llama_vocab::load` (src/llama-vocab.cpp), because llama.cpp is the
reference our tokenization is tested against: its defaults when a key is absent, its text-based detection
of end-of-turn / FIM / end-of-generation tokens, and the attribute overrides that detection implies.
"""
from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from enum import IntFlag
from typing import Any

import numpy as np

from ..errors import TokenizerError
from ..limits import MAX_MERGES, MAX_TOKEN_CHARS, MAX_VOCAB, MAX_VOCAB_CHARS


class Attr(IntFlag):
    """llama.cpp's `llama_token_attr` bits (only the ones tokenization and detokenization look at)."""
    UNDEFINED = 0
    UNKNOWN = 1 << 0
    UNUSED = 1 << 1
    NORMAL = 1 << 2
    CONTROL = 1 << 3
    USER_DEFINED = 1 << 4
    BYTE = 1 << 5


# GGUF `tokenizer.ggml.token_type` values (llama_token_type) -> attribute.
_TYPE_TO_ATTR = {0: Attr.UNDEFINED, 1: Attr.NORMAL, 2: Attr.UNKNOWN, 3: Attr.CONTROL,
                 4: Attr.USER_DEFINED, 5: Attr.UNUSED, 6: Attr.BYTE}

# Token texts llama.cpp recognises when the metadata names no id (same lists, same priority).
EOT_TEXTS = ("<|eot_id|>", "<|im_end|>", "<|end|>", "<end_of_turn>", "<|endoftext|>", "<|end_of_text|>",
             "<EOT>", "_<EOT>", "[EOT]", "<｜end▁of▁sentence｜>", "<end_of_utterance>")
EOM_TEXTS = ("<|eom_id|>",)
FIM_TEXTS = {
    "fim_pre": ("<|fim_prefix|>", "<fim-prefix>", "<fim_prefix>", "<｜fim▁begin｜>", "<PRE>", "▁<PRE>",
                "<|code_prefix|>", "<|prefix|>"),
    "fim_suf": ("<|fim_suffix|>", "<fim-suffix>", "<fim_suffix>", "<｜fim▁hole｜>", "<SUF>", "▁<SUF>",
                "<|code_suffix|>", "<|suffix|>"),
    "fim_mid": ("<|fim_middle|>", "<fim-middle>", "<fim_middle>", "<｜fim▁end｜>", "<MID>", "▁<MID>",
                "<|code_middle|>", "<|middle|>"),
    "fim_pad": ("<|fim_pad|>", "<fim-pad>", "<fim_pad>", "<PAD>", "[PAD]"),
    "fim_rep": ("<|fim_repo|>", "<|repo_name|>", "<fim-repo>", "<REPO>", "<reponame>"),
    "fim_sep": ("<|file_sep|>",),
}
EOG_TEXTS = frozenset({
    "<|eot_id|>", "<|im_end|>", "<|end|>", "<|return|>", "<|call|>", "<|flush|>", "<|calls|>",
    "<end_of_turn>", "<|endoftext|>", "</s>", "<|eom_id|>", "<EOT>", "_<EOT>", "[EOT]", "[EOS]",
    "<|end_of_text|>", "<end_of_utterance>", "<eos>", "<turn|>", "<|tool_response>",
    "<｜end▁of▁sentence｜>", "[e~["})

# tokenizer.ggml.pre -> (pre-tokenizer regexes applied in sequence, ignore_merges, add_bos default).
# Regexes copied from llama.cpp's llm_tokenizer_bpe (the "adapted" forms without (?i:...)).
_GPT2_RE = r"'s|'t|'re|'ve|'m|'ll|'d| ?\p{L}+| ?\p{N}+| ?[^\s\p{L}\p{N}]+|\s+(?!\S)"
_CONTRACTIONS = r"(?:'[sS]|'[tT]|'[rR][eE]|'[vV][eE]|'[mM]|'[lL][lL]|'[dD])"
_LLAMA3_RE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}{1,3}| ?[^\s\p{L}\p{N}]+[\r\n]*"
              r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_QWEN2_RE = (_CONTRACTIONS + r"|[^\r\n\p{L}\p{N}]?\p{L}+|\p{N}| ?[^\s\p{L}\p{N}]+[\r\n]*"
             r"|\s*[\r\n]+|\s+(?!\S)|\s+")
_CJK = "[\u4e00-\u9fa5\u0800-\u4e00\uac00-\ud7ff]+"
_PRE: dict[str, tuple[tuple[str, ...], bool, bool]] = {
    "default": ((r"[\p{P}\$\+<=>\^~\|]+", _GPT2_RE, r"\p{N}+", "[0-9][0-9][0-9]"), False, False),
    "gpt2": ((_GPT2_RE,), False, False),
    "llama3": ((_LLAMA3_RE,), True, True),
    "qwen2": ((_QWEN2_RE,), False, False),
    "smollm": ((r"\p{N}", _GPT2_RE), False, False),   # single digits, then GPT-2's split
    "deepseek-llm": ((
        '[\r\n]',
        '\\s?[A-Za-z\xb5\xc0-\xd6\xd8-\xf6\xf8-\u01ba\u01bc-\u01bf\u01c4-\u0293\u0295-\u02af\u0370-\u0373'
        '\u0376\u0377\u037b-\u037d\u037f\u0386\u0388-\u038a\u038c\u038e-\u03a1\u03a3-\u03f5\u03f7-\u0481'
        '\u048a-\u052f\u0531-\u0556\u10a0-\u10c5\u13a0-\u13f5\u13f8-\u13fd\u1c90-\u1cba\u1cbd-\u1cbf'
        '\u1d00-\u1d2b\u1d6b-\u1d77\u1d79-\u1d9a\u1e00-\u1f15\u1f18-\u1f1d\u1f20-\u1f45\u1f48-\u1f4d'
        '\u1f50-\u1f57\u1f59\u1f5b\u1f5d\u1f5f-\u1f7d\u1f80-\u1fb4\u1fb6-\u1fbc\u1fbe\u1fc2-\u1fc4\u1fc6-'
        '\u1fcc\u1fd0-\u1fd3\u1fd6-\u1fdb\u1fe0-\u1fec\u1ff2-\u1ff4\u1ff6-\u1ffc\u2102\u2107\u210a-\u2113'
        '\u2115\u2119-\u211d\u2124\u2126\u2128\u212a-\u212d\u212f-\u2134\u2139\u213c-\u213f\u2145-\u2149'
        '\u214e\u2183\u2184\u2c00-\u2c7b\u2c7e-\u2ce4\u2ceb-\u2cee\u2cf2\u2cf3\ua640-\ua66d\ua680-\ua69b'
        '\ua722-\ua76f\ua771-\ua787\ua78b-\ua78e\uab70-\uabbf\ufb00-\ufb06\ufb13-\ufb17\uff21-\uff3a'
        '\uff41-\uff5a\U00010400-\U0001044f\U000104b0-\U000104d3\U000104d8-\U000104fb\U00010c80-'
        '\U00010cb2\U00010cc0-\U00010cf2\U000118a0-\U000118df\U0001e900-\U0001e943]+',
        '\\s?[!-/:-~\uff01-\uff0f\uff1a-\uff5e\u2018-\u201f\u3000-\u3002]+',
        '\\s+$',
        _CJK,
        r"\p{N}+"), False, False),
    "deepseek-coder": (("[\r\n]", r"\s?\p{L}+", r"\s?\p{P}+", _CJK, r"\p{N}"), False, False),
}
# Other names llama.cpp maps onto the same pre-tokenizer.
_PRE_ALIASES = {
    "": "default", "gpt-2": "gpt2", "phi-2": "gpt2", "mpt": "gpt2", "olmo": "gpt2", "jais": "gpt2",
    "llama-bpe": "llama3", "llama-v3": "llama3", "falcon3": "llama3", "pixtral": "llama3", "dbrx": "llama3",
    "smaug-bpe": "llama3", "deepseek-r1-qwen": "qwen2", "stablelm2": "qwen2",
    "starcoder": "smollm", "refact": "smollm", "codeshell": "smollm",
}


@dataclass(frozen=True)
class PreTokenizer:
    """How a byte-level BPE vocabulary splits text into words before merging."""
    name: str
    regexes: tuple[str, ...]
    ignore_merges: bool


@dataclass
class Vocab:
    """The parts of GGUF tokenizer metadata that encoding, decoding and generation need."""
    model: str                    # "llama" (SentencePiece-style), "gpt2" (byte-level BPE) or "bert" (WordPiece)
    tokens: list[str]
    text_to_id: dict[str, int]    # the last id wins for duplicate texts, as in llama.cpp
    scores: np.ndarray            # float32, one per token (zeros when the file has none)
    attrs: np.ndarray             # int32 Attr bits, one per token, after llama.cpp's overrides
    merges: list[str] | None      # BPE only, "left right" strings in rank order
    pre: PreTokenizer | None      # BPE only
    bos_id: int | None
    eos_id: int | None
    eot_id: int | None
    eom_id: int | None
    unk_id: int | None
    eog_ids: frozenset[int]
    add_bos: bool
    add_eos: bool
    add_space_prefix: bool
    chat_template: str | None
    # WordPiece ("bert") only; see wordpiece.py
    sep_id: int | None = None
    lowercase: bool = False
    strip_accents: bool = False


def _short(v: Any) -> str:
    """A metadata value for a message: its repr, cut to 60 characters."""
    text = repr(v)
    return text if len(text) <= 60 else text[:57] + "..."


def _opt_int(md: Mapping[str, Any], key: str) -> int | None:
    v = md.get(key)
    if v is None:
        return None
    if isinstance(v, (bool, np.bool_)) or not isinstance(v, (int, np.integer)):
        raise TokenizerError(f"{key} must be an integer, got {_short(v)}")
    return int(v)


def _flag(md: Mapping[str, Any], key: str, default: bool) -> bool:
    v = md.get(key)
    if v is None:
        return default
    if not isinstance(v, (bool, np.bool_, int, np.integer)):
        raise TokenizerError(f"{key} must be a bool, got {_short(v)}")
    return bool(v)


def check_tokens(tokens: Any) -> list[str]:
    """`tokenizer.ggml.tokens` as a list of strings within the budgets of `oxigpu.limits` (checked before
    anything is built from it)."""
    if not isinstance(tokens, list) or not tokens or not all(isinstance(t, str) for t in tokens):
        raise TokenizerError("tokenizer.ggml.tokens is missing or is not a non-empty list of strings")
    if len(tokens) > MAX_VOCAB:
        raise TokenizerError(f"tokenizer.ggml.tokens holds {len(tokens)} tokens, over the limit of {MAX_VOCAB} "
                             f"(oxigpu.limits.MAX_VOCAB)")
    lengths = np.fromiter(map(len, tokens), np.int64, len(tokens))
    longest = int(lengths.argmax())
    if lengths[longest] > MAX_TOKEN_CHARS:
        raise TokenizerError(f"tokenizer.ggml.tokens[{longest}] is {lengths[longest]} characters long, over the "
                             f"limit of {MAX_TOKEN_CHARS} (oxigpu.limits.MAX_TOKEN_CHARS)")
    if lengths.sum() > MAX_VOCAB_CHARS:
        raise TokenizerError(f"tokenizer.ggml.tokens holds {lengths.sum()} characters in all, over the limit of "
                             f"{MAX_VOCAB_CHARS} (oxigpu.limits.MAX_VOCAB_CHARS)")
    return tokens


def vocab_from_metadata(md: Mapping[str, Any]) -> Vocab:
    """Read and validate the tokenizer keys, applying llama.cpp's defaults and special-token detection."""
    model = md.get("tokenizer.ggml.model")
    if not isinstance(model, str) or model not in ("llama", "gpt2"):
        raise TokenizerError(f"tokenizer.ggml.model {_short(model)} is not supported (expected 'llama' or 'gpt2')")
    tokens = check_tokens(md.get("tokenizer.ggml.tokens"))
    n = len(tokens)
    # llama.cpp renames empty tokens so every text stays unique and non-empty.
    tokens = [t if t else f"[EMPTY_{i}]" for i, t in enumerate(tokens)]

    def array(key: str, dtype: type) -> np.ndarray | None:
        v = md.get(key)
        if v is None:
            return None
        a = v if isinstance(v, np.ndarray) else None   # the GGUF reader gives numeric arrays as numpy arrays
        if a is None or a.ndim != 1 or a.shape[0] < n or not np.issubdtype(a.dtype, np.number):
            raise TokenizerError(f"{key} must be a numeric array with at least {n} entries")
        with np.errstate(invalid="ignore", over="ignore"):   # NaN/huge scores, out-of-range types: handled below
            return a[:n].astype(dtype)

    scores = array("tokenizer.ggml.scores", np.float32)
    scores = np.zeros(n, np.float32) if scores is None else scores
    types = array("tokenizer.ggml.token_type", np.int32)
    if types is None:
        attrs = np.full(n, int(Attr.NORMAL), np.int32)
    else:
        lut = np.zeros(8, np.int32)
        for t, a in _TYPE_TO_ATTR.items():
            lut[t] = int(a)
        attrs = lut[np.clip(types, 0, 7)]
        attrs[(types < 0) | (types > 6)] = int(Attr.UNDEFINED)

    merges = pre = None
    if model == "llama":
        bos, eos, unk = 1, 2, 0
        add_bos, add_space_prefix = True, True
    else:
        merges = md.get("tokenizer.ggml.merges")
        if not isinstance(merges, list) or not all(isinstance(m, str) for m in merges):
            raise TokenizerError("a 'gpt2' tokenizer needs tokenizer.ggml.merges (a list of strings)")
        if len(merges) > MAX_MERGES:
            raise TokenizerError(f"tokenizer.ggml.merges holds {len(merges)} merges, over the limit of "
                                 f"{MAX_MERGES} (oxigpu.limits.MAX_MERGES)")
        pre_name = str(md.get("tokenizer.ggml.pre", "default"))
        key = _PRE_ALIASES.get(pre_name, pre_name)
        if key not in _PRE:
            known = sorted(set(_PRE) | set(_PRE_ALIASES) - {""})
            raise TokenizerError(f"tokenizer.ggml.pre {pre_name!r} is not supported; known: {', '.join(known)}")
        regexes, ignore_merges, add_bos = _PRE[key]
        pre = PreTokenizer(key, regexes, ignore_merges)
        bos, eos, unk = 11, 11, None
        add_space_prefix = False

    def special(key: str, default: int | None) -> int | None:
        if default is not None and default >= n:
            default = None
        v = _opt_int(md, f"tokenizer.ggml.{key}_token_id")
        return v if v is not None and 0 <= v < n else default

    bos, eos, unk = special("bos", bos), special("eos", eos), special("unknown", unk)
    eot, eom = special("eot", None), special("eom", None)
    fim = {k: special(k, None) for k in FIM_TEXTS}

    # Text-based detection, as llama.cpp does; a detected token becomes a control token.
    text_to_id = {t: i for i, t in enumerate(tokens)}

    def detect(current: int | None, texts: tuple[str, ...]) -> int | None:
        if current is not None:
            return current
        for t in texts:
            if t in text_to_id:
                attrs[text_to_id[t]] |= int(Attr.CONTROL)
                return text_to_id[t]
        return None

    eot = detect(eot, EOT_TEXTS)
    eom = detect(eom, EOM_TEXTS)
    fim = {k: detect(v, FIM_TEXTS[k]) for k, v in fim.items()}
    eog = {i for i in (fim["fim_pad"], fim["fim_rep"], fim["fim_sep"], eos, eot, eom) if i is not None}
    for t in EOG_TEXTS:
        if t in text_to_id:
            eog.add(text_to_id[t])
            attrs[text_to_id[t]] |= int(Attr.CONTROL)

    return Vocab(
        model=model, tokens=tokens, text_to_id=text_to_id, scores=scores, attrs=attrs, merges=merges, pre=pre,
        bos_id=bos, eos_id=eos, eot_id=eot, eom_id=eom, unk_id=unk, eog_ids=frozenset(eog),
        add_bos=_flag(md, "tokenizer.ggml.add_bos_token", add_bos),
        add_eos=_flag(md, "tokenizer.ggml.add_eos_token", False),
        add_space_prefix=_flag(md, "tokenizer.ggml.add_space_prefix", add_space_prefix),
        chat_template=md.get("tokenizer.chat_template"),
    )
