"""Record llama.cpp's tokenizations of a mixed corpus as small JSON fixtures (tests/fixtures/tokenizer/).

Needs llama-cpp-python (see MODELS.md for the build flags) and the real model packages; CI never runs
this, it only reads the JSON. Re-run after changing CORPUS:

    python3 dev/make_tokenizer_fixtures.py

Per model the fixture holds: llama.cpp's special ids (bos, eos, eot, every end-of-generation id), a
SHA-256 over every token's piece (token_to_piece with special=True and False, so the whole vocabulary's
detokenization is checked without storing it), the chat template rendered by llama-cpp-python's Jinja2
formatter (when the file has one), and for each corpus text the ids for (add_special, parse_special) in
{(True, True), (False, False)} and llama_detokenize of the first with unparse_special True and False.
"""
from __future__ import annotations

import ctypes
import hashlib
import json
import random
import sys
from pathlib import Path

import llama_cpp
from llama_cpp.llama_chat_format import Jinja2ChatFormatter

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
from oxigpu import model_packages  # noqa: E402

OUT = Path(__file__).resolve().parents[1] / "tests" / "fixtures" / "tokenizer"

CORPUS = [
    "",
    " ",
    "Hello world",
    "Hello, world! How are you doing today?",
    "The quick brown fox jumps over the lazy dog. It's 5 o'clock; they'll say WE'RE late, don't you think?",
    "  two leading spaces",
    "trailing spaces   ",
    "   both sides   ",
    "tabs\tand\t\ttwo tabs\t\t\tthree",
    "line one\nline two\n\nblank above\n\n\n\nmany blanks",
    "windows\r\nline endings\r\n",
    "spaces      six and                                          forty-two",
    "\n\n\n",
    "\t\t\t\t",
    "1234567",
    "3.14159265358979 and 1,000,000 and 2024-01-31 and 0x1F",
    "def fibonacci(n: int) -> int:\n    \"\"\"Return the n-th Fibonacci number.\"\"\"\n    if n < 2:\n"
    "        return n\n    return fibonacci(n - 1) + fibonacci(n - 2)\n",
    "class Foo:\n\tdef bar(self):\n\t\treturn {'a': [1, 2, 3]}  # comment\n",
    "for (int i = 0; i < n; ++i) { sum += a[i] * b[i]; }",
    "人工智能是计算机科学的一个分支。",
    "日本語のテキストとカタカナ、ひらがな。東京は日本の首都です。",
    "한국어 텍스트입니다.",
    "Emoji: 😀😃😄 👍🏽 👋🏿 🇯🇵🇺🇸",
    "Family: 👨‍👩‍👧‍👦 and 🏳️‍🌈 and 🧑🏽‍💻",
    "Combining: e\u0301 a\u0308 n\u0303 Z\u0351\u0315a\u0362\u0317l\u0358g\u0353o",
    "Precomposed vs decomposed: \u00e9 vs e\u0301, \u212b vs \u00c5",
    "RTL: مرحبا بالعالم and שלום עולם mixed with English",
    "Math: ∀x∈ℝ, x² ≥ 0; 𝔘𝔫𝔦𝔠𝔬𝔡𝔢 𝟙𝟚𝟛",
    "Zero width:\u200b|\u200c|\u200d|\ufeff|\u2028|\u00a0|\u3000|end",
    "Control chars: \x00\x01\x07\x1b[0m\x7f",
    "<start_of_turn>user\nWhat is 2+2?<end_of_turn>\n<start_of_turn>model\n",
    "<|im_start|>system\nYou are helpful.<|im_end|>\n<|im_start|>user\nHi<|im_end|>\n",
    "text<|endoftext|>more text",
    "<bos><eos><pad><unk> literal specials",
    "<s>sentence</s> and <b>bold</b> <table><tr><td>cell</td></tr></table>",
    "<|fim_prefix|>def f():<|fim_suffix|>\n    return 1<|fim_middle|>",
    "<tool_call>{\"name\": \"f\"}</tool_call>",
    "<unused0> <start_of_image> <|vision_start|>",
    "almost special: <start_of_turn <|im_start| <|endoftext|",
    "\u2581literal lower one eighth block\u2581\u2581 and <0x41> text",
    "aaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaaa",
    "URL https://example.com/path?query=1&b=2#frag and email a.b@c.org",
    "Mixed 中文 and English, 日本語 and 123 numbers, émojis 🎉!",
    "Ünïcödé àccénts: naïve café résumé façade coöperate",
    "Greek Ελληνικά, Cyrillic Кириллица, Thai ภาษาไทย, Hindi हिन्दी",
]


def _random_corpus(seed: int = 1234, n: int = 12) -> list[str]:
    """Random strings over several scripts and whitespace, fixed seed (kept in the fixture verbatim)."""
    rng = random.Random(seed)
    pools = ["abcdefghijklmnopqrstuvwxyzABCDEFGHIJKLMNOPQRSTUVWXYZ0123456789", " \t\n  ",
             ".,;:!?'\"()[]{}<>|/\\-_=+*&^%$#@~`", "中文字符日本語テキスト한국어", "éèêëàâäôöùûüçñßøå",
             "😀👍🏽👨‍👩‍👧🇯🇵🎉", "αβγδεζηθ абвгд אבגד عربى", "\u0301\u0308\u200d\u200b"]
    out = []
    for _ in range(n):
        length = rng.randint(1, 60)
        out.append("".join(rng.choice(rng.choice(pools)) for _ in range(length)))
    return out


def _detokenize(vocab: ctypes.c_void_p, ids: list[int], unparse_special: bool) -> str:
    arr = (llama_cpp.llama_token * max(1, len(ids)))(*ids)
    buf = ctypes.create_string_buffer(1 << 16)
    n = llama_cpp.llama_detokenize(vocab, arr, len(ids), buf, len(buf), False, unparse_special)
    assert n >= 0, "detokenize buffer too small"
    return buf.raw[:n].decode("utf-8", "replace")


def _pieces_digest(vocab: ctypes.c_void_p, n_vocab: int, special: bool) -> str:
    """SHA-256 over len-prefixed token_to_piece bytes of every id: one string checks the whole vocab."""
    h = hashlib.sha256()
    buf = ctypes.create_string_buffer(1 << 12)
    for i in range(n_vocab):
        n = llama_cpp.llama_token_to_piece(vocab, i, buf, len(buf), 0, special)
        assert n >= 0
        h.update(n.to_bytes(4, "little") + buf.raw[:n])
    return h.hexdigest()


CHATS = [
    [{"role": "user", "content": "Hello!"}],
    [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
     {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3? 日本語 😀"}],
]


def make(name: str, path: Path) -> None:
    llm = llama_cpp.Llama(model_path=str(path), vocab_only=True, verbose=False)
    vocab = llama_cpp.llama_model_get_vocab(llm.model)
    n_vocab = llama_cpp.llama_vocab_n_tokens(vocab)
    cases = []
    for text in CORPUS + _random_corpus():
        with_special = llm.tokenize(text.encode(), add_bos=True, special=True)
        plain = llm.tokenize(text.encode(), add_bos=False, special=False)
        cases.append({
            "text": text,
            "ids": with_special,
            "ids_plain": plain,
            "decoded": _detokenize(vocab, with_special, True),
            "decoded_skip_special": _detokenize(vocab, with_special, False),
        })
    meta = llm.metadata
    fixture = {
        "model": name,
        "source": path.name,
        "llama_cpp_python": llama_cpp.__version__,
        "n_vocab": n_vocab,
        "bos_id": llama_cpp.llama_vocab_bos(vocab),
        "eos_id": llama_cpp.llama_vocab_eos(vocab),
        "eot_id": llama_cpp.llama_vocab_eot(vocab),
        "eog_ids": [i for i in range(n_vocab) if llama_cpp.llama_vocab_is_eog(vocab, i)],
        "pieces_sha256": _pieces_digest(vocab, n_vocab, True),
        "pieces_sha256_no_special": _pieces_digest(vocab, n_vocab, False),
        "cases": cases,
    }
    template = meta.get("tokenizer.chat_template")
    if template:
        bos = llm.detokenize([llm.token_bos()], special=True).decode()
        eos = llm.detokenize([llm.token_eos()], special=True).decode()
        fixture["chat_template"] = template
        fixture["chat_bos"], fixture["chat_eos"] = bos, eos
        fixture["chats"] = [{"messages": m, "prompt": Jinja2ChatFormatter(template, eos, bos)(messages=m).prompt}
                            for m in CHATS]
    OUT.mkdir(parents=True, exist_ok=True)
    out = OUT / f"{name}.json"
    out.write_text(json.dumps(fixture, ensure_ascii=False, indent=1) + "\n", encoding="utf-8")
    print(f"wrote {out} ({out.stat().st_size} bytes, {len(cases)} texts)")


if __name__ == "__main__":
    make("gemma3", model_packages.gemma3_270m())
    make("qwen2", model_packages.qwen25_coder_05b())
    make("smollm2", model_packages.smollm2_135m())
