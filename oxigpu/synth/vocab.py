"""Synthetic tokenizer metadata that llama.cpp (and oxigpu's tokenizer) load as a real vocabulary.

Two families, as in real GGUF files:

* SentencePiece-style (`tokenizer.ggml.model = "llama"`): control tokens, the 256 byte tokens
  <0x00>..<0xFF> (so any text can be encoded), then "▁"-prefixed and plain word pieces with scores.
  `spm-llama2` uses Llama 2's ids (<unk> 0, <s> 1, </s> 2); `spm-gemma` uses Gemma 3's
  (<pad> 0, <eos> 1, <bos> 2, <unk> 3, <mask> 4) plus its turn markers.
* Byte-level BPE (`tokenizer.ggml.model = "gpt2"`): the 256 byte symbols of GPT-2's byte-to-unicode map,
  then one token per merge, where every merge joins two tokens that already exist (so tokens and merges
  agree), then the family's special tokens and unused padding up to the model's vocab size.
  `bpe-llama3` (pre "llama-bpe", specials at 128000+) and `bpe-qwen2` (pre "qwen2", specials at 151643+).

Pieces are enumerated from letters ordered by English frequency, shortest first, so the vocab is cheap to
build at any size (a 262,144-token vocab takes well under a second) and identical every time.
"""
from __future__ import annotations

import itertools
from collections.abc import Iterator
from dataclasses import dataclass, field

import numpy as np

from ..errors import InvalidParameterError

# token_type values (llama.cpp's llama_token_type / gguf.TokenType)
NORMAL, UNKNOWN, CONTROL, UNUSED, BYTE = 1, 2, 3, 5, 6

_LETTERS = "etaoinshrdlcumwfgypbvkjxqz"
_EXTRA = "ETAOINSHRDLCUMWFGYPBVKJXQZ0123456789.,;:!?'\"-()[]{}<>/\\|@#$%^&*_+=~`"

CHATML = ("{% for message in messages %}{{ '<|im_start|>' + message['role'] + '\n' + message['content'] "
          "+ '<|im_end|>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<|im_start|>assistant\n' }}"
          "{% endif %}")
LLAMA3 = ("{{ bos_token }}{% for message in messages %}{{ '<|start_header_id|>' + message['role'] "
          "+ '<|end_header_id|>\n\n' + message['content'] | trim + '<|eot_id|>' }}{% endfor %}"
          "{% if add_generation_prompt %}{{ '<|start_header_id|>assistant<|end_header_id|>\n\n' }}{% endif %}")
GEMMA = ("{{ bos_token }}{% for message in messages %}{% set role = 'model' if message['role'] == 'assistant' "
         "else message['role'] %}{{ '<start_of_turn>' + role + '\n' + message['content'] | trim "
         "+ '<end_of_turn>\n' }}{% endfor %}{% if add_generation_prompt %}{{ '<start_of_turn>model\n' }}"
         "{% endif %}")
LLAMA2 = ("{{ bos_token }}{% for message in messages %}{% if message['role'] == 'user' %}"
          "{{ '[INST] ' + message['content'] | trim + ' [/INST]' }}{% elif message['role'] == 'assistant' %}"
          "{{ ' ' + message['content'] | trim + eos_token }}{% endif %}{% endfor %}")


@dataclass
class Vocab:
    """Everything that goes under `tokenizer.*` in the GGUF file."""

    model: str
    pre: str
    tokens: list[str]
    token_types: np.ndarray
    bos: int
    eos: int
    eot: int | None
    add_bos: bool
    chat_template: str | None
    scores: np.ndarray | None = None
    merges: list[str] = field(default_factory=list)
    unk: int | None = None
    pad: int | None = None
    add_space_prefix: bool | None = None
    sep: int | None = None                 # WordPiece: [SEP]
    token_type_count: int = 0              # WordPiece: rows of token_types.weight


def build_vocab(style: str, n_vocab: int, chat_template: bool) -> Vocab:
    """The vocabulary of `style`, exactly `n_vocab` tokens long."""
    builders = {"spm-llama2": _spm_llama2, "spm-gemma": _spm_gemma, "spm-phi3": _spm_phi3, "wpm-bert": _wpm_bert,
                "bpe-llama3": _bpe_llama3, "bpe-qwen2": _bpe_qwen2}
    if style not in builders:
        raise InvalidParameterError(f"unknown vocab style {style!r}")
    v = builders[style](n_vocab)
    if not chat_template:
        v.chat_template = None
    if len(v.tokens) != n_vocab or len(set(v.tokens)) != n_vocab:
        raise AssertionError(f"vocab {style} built {len(v.tokens)} tokens, wanted {n_vocab} unique")
    return v


def _pieces() -> Iterator[str]:
    """Word pieces, shortest first: each length as plain and "▁"-prefixed (word-initial) variants."""
    yield "▁"
    yield from _LETTERS + _EXTRA
    for n in itertools.count(1):
        for combo in itertools.product(_LETTERS, repeat=n):
            s = "".join(combo)
            yield "▁" + s
            if n > 1:
                yield s


def _spm(specials: list[tuple[str, int]], n_vocab: int) -> tuple[list[str], np.ndarray, np.ndarray]:
    """Specials, then the 256 byte tokens, then scored pieces up to `n_vocab`."""
    tokens = [t for t, _ in specials] + [f"<0x{b:02X}>" for b in range(256)]
    types = [k for _, k in specials] + [BYTE] * 256
    n_fixed = len(tokens)
    if n_vocab < n_fixed + len(_LETTERS) + 1:
        raise InvalidParameterError(f"vocab size {n_vocab} is too small for a SentencePiece vocab")
    tokens += itertools.islice(_pieces(), n_vocab - n_fixed)
    types += [NORMAL] * (n_vocab - n_fixed)
    scores = np.zeros(n_vocab, dtype=np.float32)
    scores[n_fixed:] = -np.arange(n_vocab - n_fixed, dtype=np.float32)
    return tokens, np.asarray(types, dtype=np.int32), scores


def _spm_llama2(n_vocab: int) -> Vocab:
    tokens, types, scores = _spm([("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)], n_vocab)
    return Vocab("llama", "default", tokens, types, bos=1, eos=2, eot=None, add_bos=True,
                 chat_template=LLAMA2, scores=scores, unk=0, add_space_prefix=True)


PHI3 = ("{% for message in messages %}{{ '<|' + message['role'] + '|>\n' + message['content'] + '<|end|>\n' }}"
        "{% endfor %}{% if add_generation_prompt %}{{ '<|assistant|>\n' }}{% endif %}")
_PHI3_ADDED = ("<|endoftext|>", "<|assistant|>", "<|placeholder1|>", "<|placeholder2|>", "<|placeholder3|>",
               "<|placeholder4|>", "<|system|>", "<|end|>", "<|placeholder5|>", "<|placeholder6|>", "<|user|>")


def _spm_phi3(n_vocab: int) -> Vocab:
    """Llama 2's vocabulary with Phi-3's chat tokens appended (llama.cpp looks for them in phi3 files)."""
    n = n_vocab - len(_PHI3_ADDED)
    tokens, types, scores = _spm([("<unk>", UNKNOWN), ("<s>", CONTROL), ("</s>", CONTROL)], n)
    tokens += _PHI3_ADDED
    types = np.concatenate([types, np.full(len(_PHI3_ADDED), CONTROL, np.int32)])
    scores = np.concatenate([scores, np.zeros(len(_PHI3_ADDED), np.float32)])
    end = n + _PHI3_ADDED.index("<|end|>")
    return Vocab("llama", "default", tokens, types, bos=1, eos=n, eot=end, add_bos=False, chat_template=PHI3,
                 scores=scores, unk=0, pad=n, add_space_prefix=True)


def _spm_gemma(n_vocab: int) -> Vocab:
    specials = [("<pad>", CONTROL), ("<eos>", CONTROL), ("<bos>", CONTROL), ("<unk>", UNKNOWN),
                ("<mask>", CONTROL), ("<start_of_turn>", CONTROL), ("<end_of_turn>", CONTROL)]
    tokens, types, scores = _spm(specials, n_vocab)
    scores[:len(specials)] = -1000.0
    return Vocab("llama", "default", tokens, types, bos=2, eos=1, eot=6, add_bos=True, chat_template=GEMMA,
                 scores=scores, unk=3, pad=0, add_space_prefix=False)


def _wpm_bert(n_vocab: int) -> Vocab:
    """BERT's layout in llama.cpp's spelling: [PAD] 0, [unused*], [UNK] 100, [CLS] 101, [SEP] 102, [MASK] 103,
    then word-initial pieces ("▁" + text) and continuation pieces (bare text)."""
    tokens = ["[PAD]"] + [f"[unused{i}]" for i in range(99)] + ["[UNK]", "[CLS]", "[SEP]", "[MASK]"]
    types = [CONTROL] + [NORMAL] * 99 + [CONTROL] * 4
    if n_vocab < len(tokens) + 2 * len(_LETTERS + _EXTRA):
        raise InvalidParameterError(f"vocab size {n_vocab} is too small for a WordPiece vocab")
    seen = set(tokens)
    for piece in _pieces():
        for t in (piece if piece.startswith("▁") else "▁" + piece, piece.lstrip("▁")):
            if len(tokens) < n_vocab and t and t not in seen:
                tokens.append(t)
                types.append(NORMAL)
                seen.add(t)
        if len(tokens) == n_vocab:
            break
    return Vocab("bert", "default", tokens, np.asarray(types, np.int32), bos=101, eos=102, eot=None, add_bos=True,
                 chat_template=None, scores=np.full(n_vocab, -1000.0, np.float32), unk=100, pad=0, sep=102,
                 token_type_count=2)


def _byte_symbols() -> list[str]:
    """GPT-2's bytes_to_unicode in vocab order: printable bytes as themselves, then the rest as U+0100...."""
    keep = [*range(ord("!"), ord("~") + 1), *range(ord("¡"), ord("¬") + 1), *range(ord("®"), ord("ÿ") + 1)]
    return [chr(b) for b in keep] + [chr(256 + i) for i in range(256 - len(keep))]


def _bpe_normal(n_normal: int) -> tuple[list[str], list[str]]:
    """Byte symbols plus `n_normal - 256` merged tokens, with merges that build each from two tokens."""
    tokens = _byte_symbols()
    merges: list[str] = []
    if n_normal < len(tokens):
        raise InvalidParameterError(f"vocab size too small for a byte-level BPE vocab ({n_normal} normal tokens)")
    space = "Ġ"
    frontier = [space] + list(_LETTERS)          # level-1 tokens that merges extend
    seen = set(tokens)
    while len(tokens) < n_normal:
        nxt = []
        for left in frontier:
            for right in _LETTERS:
                new = left + right
                if new in seen:
                    continue
                merges.append(f"{left} {right}")
                tokens.append(new)
                seen.add(new)
                nxt.append(new)
                if len(tokens) == n_normal:
                    return tokens, merges
        frontier = nxt
    return tokens, merges


def _bpe(n_vocab: int, specials: list[str], n_pad: int) -> tuple[list[str], np.ndarray, list[str], int]:
    """Normal tokens, then `specials` (CONTROL), then `n_pad` UNUSED "[PAD<id>]" tokens; returns the first
    special id."""
    n_normal = n_vocab - len(specials) - n_pad
    tokens, merges = _bpe_normal(n_normal)
    tokens += specials
    tokens += [f"[PAD{n_normal + len(specials) + i}]" for i in range(n_pad)]
    types = np.full(n_vocab, NORMAL, dtype=np.int32)
    types[n_normal:n_normal + len(specials)] = CONTROL
    types[n_normal + len(specials):] = UNUSED
    return tokens, types, merges, n_normal


def _bpe_llama3(n_vocab: int) -> Vocab:
    # Llama 3: 128,000 normal tokens, then 256 specials (tiny vocabs keep the same 256-special block).
    names = ["<|begin_of_text|>", "<|end_of_text|>", "<|reserved_special_token_0|>",
             "<|reserved_special_token_1|>", "<|finetune_right_pad_id|>", "<|reserved_special_token_2|>",
             "<|start_header_id|>", "<|end_header_id|>", "<|eom_id|>", "<|eot_id|>", "<|python_tag|>"]
    names += [f"<|reserved_special_token_{i}|>" for i in range(3, 3 + 256 - len(names))]
    tokens, types, merges, b = _bpe(n_vocab, names, 0)
    return Vocab("gpt2", "llama-bpe", tokens, types, bos=b, eos=b + 9, eot=b + 9, add_bos=True,
                 chat_template=LLAMA3, merges=merges)


def _bpe_qwen2(n_vocab: int) -> Vocab:
    # Qwen2: 151,643 normal tokens, 22 specials, then 271 unused "[PAD...]" rows up to 151,936.
    specials = ["<|endoftext|>", "<|im_start|>", "<|im_end|>", "<|object_ref_start|>", "<|object_ref_end|>",
                "<|box_start|>", "<|box_end|>", "<|quad_start|>", "<|quad_end|>", "<|vision_start|>",
                "<|vision_end|>", "<|vision_pad|>", "<|image_pad|>", "<|video_pad|>", "<tool_call>",
                "</tool_call>", "<|fim_prefix|>", "<|fim_middle|>", "<|fim_suffix|>", "<|fim_pad|>",
                "<|repo_name|>", "<|file_sep|>"]
    tokens, types, merges, b = _bpe(n_vocab, specials, 271)
    return Vocab("gpt2", "qwen2", tokens, types, bos=b, eos=b + 2, eot=b + 2, add_bos=False,
                 chat_template=CHATML, merges=merges, pad=b)
