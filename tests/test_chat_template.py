"""Chat templates: Qwen2's own template against llama-cpp-python's Jinja2 formatter, the fallbacks, and
hostile templates embedded in synthetic GGUF metadata."""
from __future__ import annotations

import json
from pathlib import Path

import numpy as np
import pytest

from oxigpu.errors import TemplateError
from oxigpu.tokenizer import ChatTemplate, Tokenizer, fallback_template
from oxigpu.tokenizer.chat import CHATML_TEMPLATE, GEMMA_TEMPLATE, PLAIN_TEMPLATE

QWEN = json.loads((Path(__file__).parent / "fixtures" / "tokenizer" / "qwen2.json").read_text("utf-8"))
CHAT = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "2+2?"},
        {"role": "assistant", "content": "4"}, {"role": "user", "content": "And 3+3?"}]


def _metadata(template: str | None = None, specials: tuple[str, ...] = ()) -> dict:
    """Synthetic byte-level BPE metadata: the 256 byte symbols, optional special tokens, a template."""
    from tokenizers.pre_tokenizers import ByteLevel
    tokens = sorted(ByteLevel.alphabet()) + ["<|endoftext|>", *specials]
    md = {"tokenizer.ggml.model": "gpt2", "tokenizer.ggml.pre": "qwen2", "tokenizer.ggml.tokens": tokens,
          "tokenizer.ggml.merges": [],
          "tokenizer.ggml.token_type": np.array([1] * 256 + [3] * (1 + len(specials)), np.int32),
          "tokenizer.ggml.bos_token_id": 256, "tokenizer.ggml.eos_token_id": 256}
    if template is not None:
        md["tokenizer.chat_template"] = template
    return md


def test_qwen2_template_matches_llama_cpp_python():
    tmpl = ChatTemplate(QWEN["chat_template"], QWEN["chat_bos"], QWEN["chat_eos"])
    for chat in QWEN["chats"]:
        assert tmpl.render(chat["messages"]) == chat["prompt"]
    assert tmpl.render([{"role": "user", "content": "Hello!"}]) == (
        "<|im_start|>system\nYou are Qwen, created by Alibaba Cloud. You are a helpful assistant.<|im_end|>\n"
        "<|im_start|>user\nHello!<|im_end|>\n<|im_start|>assistant\n")
    no_prompt = tmpl.render([{"role": "user", "content": "Hello!"}], add_generation_prompt=False)
    assert no_prompt.endswith("<|im_end|>\n")


def test_qwen2_template_tools_use_tojson_without_ascii_escapes():
    tmpl = ChatTemplate(QWEN["chat_template"], QWEN["chat_bos"], QWEN["chat_eos"])
    tools = [{"type": "function", "function": {"name": "météo", "parameters": {}}}]
    out = tmpl.render([{"role": "user", "content": "x"}], tools=tools)
    assert '"name": "météo"' in out and "<tools>" in out


@pytest.mark.realmodel
def test_qwen2_prompt_tokens(qwen_path):
    from oxigpu.gguf import GGUFFile
    with GGUFFile(qwen_path) as f:
        tok = Tokenizer.from_metadata(f.metadata)
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert ids[0] == 151644 and ids[-3:] == tok.encode("<|im_start|>assistant\n")
    assert tok.eot_id in ids


GEMMA_EXPECTED = ("<bos><start_of_turn>user\nYou are terse.\n\n2+2?<end_of_turn>\n"
                  "<start_of_turn>model\n4<end_of_turn>\n"
                  "<start_of_turn>user\nAnd 3+3?<end_of_turn>\n<start_of_turn>model\n")


def test_fallback_choice_and_formats():
    assert fallback_template({"<start_of_turn>", "<end_of_turn>", "<|im_start|>", "<|im_end|>"}) == GEMMA_TEMPLATE
    assert fallback_template({"<|im_start|>", "<|im_end|>"}) == CHATML_TEMPLATE
    assert fallback_template({"<start_of_turn>"}) == PLAIN_TEMPLATE
    assert ChatTemplate(GEMMA_TEMPLATE, "<bos>").render(CHAT) == GEMMA_EXPECTED
    assert ChatTemplate(CHATML_TEMPLATE).render(CHAT[1:2]) == (
        "<|im_start|>user\n2+2?<|im_end|>\n<|im_start|>assistant\n")
    assert ChatTemplate(PLAIN_TEMPLATE).render(CHAT) == (
        "You are terse.\n\nUser: 2+2?\nAssistant: 4\nUser: And 3+3?\nAssistant:")


def test_fallback_from_metadata_without_template():
    tok = Tokenizer.from_metadata(_metadata(specials=("<start_of_turn>", "<end_of_turn>")))
    assert tok.chat_template is None and tok.chat.source == GEMMA_TEMPLATE
    assert tok.chat.render(CHAT) == GEMMA_EXPECTED.replace("<bos>", "<|endoftext|>")
    assert Tokenizer.from_metadata(_metadata()).chat.source == PLAIN_TEMPLATE


@pytest.mark.realmodel
def test_gemma3_fallback_prompt_has_one_bos(gemma3_path):
    from oxigpu.gguf import GGUFFile
    with GGUFFile(gemma3_path) as f:
        tok = Tokenizer.from_metadata(f.metadata)
    assert tok.chat_template is None
    ids = tok.apply_chat_template([{"role": "user", "content": "Hi"}])
    assert ids[:3] == [tok.bos_id, 105, tok.encode("user", add_special=False)[0]]
    assert ids.count(tok.bos_id) == 1 and tok.eot_id in ids
    assert tok.decode(ids) == "<bos><start_of_turn>user\nHi<end_of_turn>\n<start_of_turn>model\n"


def test_hf_conventions():
    out = ChatTemplate(
        "{% for m in messages %}{% if loop.index > 1 %}{% break %}{% endif %}{{ m.content }}{% endfor %}"
        "|{% generation %}gen{% endgeneration %}|{{ strftime_now('%Y') | length }}|{{ {'k': 'ü'} | tojson }}"
        "|{{ bos_token }}{{ eos_token }}|{{ extra_var }}", "<s>", "</s>").render(CHAT, extra_var=7)
    assert out == 'You are terse.|gen|4|{"k": "ü"}|<s></s>|7'
    # trim_blocks / lstrip_blocks, as in transformers
    assert ChatTemplate("  {% if true %}\nx\n  {% endif %}\n").render([]) == "x\n"


HOSTILE = {
    "class walk": "{{ ''.__class__.__mro__[1].__subclasses__() }}",
    "class in a condition": "{% if messages.__class__ %}x{% endif %}",
    "globals via cycler": "{{ cycler.__init__.__globals__.os.popen('id').read() }}",
    "globals via joiner": "{{ joiner().__call__.__globals__ }}",
    "globals via lipsum": "{{ lipsum.__globals__['os'] }}",
    "attr filter": "{{ messages | attr('__class__') }}",
    "self reference": "{{ self.__init__.__globals__ }}",
    "mutating a list": "{{ messages.append(1) }}",
    "include a file": "{% include '/etc/passwd' %}",
    "import a module": "{% import 'os' as os %}{{ os }}",
    "extends": "{% extends 'base.html' %}",
    "huge range": "{% for i in range(10**9) %}{% endfor %}",
    "nested ranges": "{% for i in range(100000) %}{% for j in range(100000) %}{% endfor %}{% endfor %}",
    "string repetition": "{{ 'a' * 10**9 }}",
    "doubling with ~": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s ~ ns.s %}"
                       "{% endfor %}{{ ns.s }}",
    "doubling with +": "{% set ns = namespace(s='ab') %}{% for i in range(60) %}{% set ns.s = ns.s + ns.s %}"
                       "{% endfor %}",
    "power tower": "{{ 10 ** (10 ** 10) }}",
    "recursion": "{% macro f() %}{{ f() }}{% endmacro %}{{ f() }}",
    "output flood": "{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}",
    "raise_exception": "{{ raise_exception('roles must alternate') }}",
}


@pytest.mark.parametrize("name", sorted(HOSTILE))
def test_hostile_templates_raise_template_error(name):
    tok = Tokenizer.from_metadata(_metadata(HOSTILE[name]))
    with pytest.raises(TemplateError) as info:
        tok.chat.render(CHAT)
    if "__" in HOSTILE[name]:
        assert "sandbox" in str(info.value) and "unsafe" in str(info.value)
    if name in ("include a file", "import a module", "extends"):
        assert "not allowed" in str(info.value)


@pytest.mark.parametrize("source", ["{% for m in messages %}", "{{ messages[0] }", "{% endif %}",
                                    "{% frobnicate %}"])
def test_malformed_templates_raise_template_error(source):
    tok = Tokenizer.from_metadata(_metadata(source))
    with pytest.raises(TemplateError, match="syntax error"):
        _ = tok.chat


def test_render_errors_are_template_errors():
    with pytest.raises(TemplateError, match="failed to render"):
        ChatTemplate("{{ messages[0]['content'] + 1 }}").render(CHAT)
    with pytest.raises(TemplateError, match="roles must alternate"):
        ChatTemplate(HOSTILE["raise_exception"]).render(CHAT)
