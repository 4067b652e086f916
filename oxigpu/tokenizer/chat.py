"""Chat templates: `tokenizer.chat_template` (Jinja2) rendered in a sandbox, HF transformers conventions.

Templates come from model files, i.e. from strangers, so they render in jinja2's
`ImmutableSandboxedEnvironment` with extra limits:
* any access to an unsafe attribute (`__class__`, `__globals__`, `mro`, `func_globals`...) raises at once
  (jinja2 normally returns an undefined value that only fails when printed);
* `{% import %}`, `{% include %}`, `{% extends %}` find no templates (there is no file access);
* `range()` has a budget over the whole render, `*`, `**`, `+` and `~` results are size-checked and the
  output is capped, so the usual runaway patterns (huge ranges, doubling strings) fail fast instead of
  exhausting memory. A template is still code: deliberately slow ones are not bounded in time.
Every failure surfaces as `oxigpu.errors.TemplateError`.

Variables, as in transformers' `apply_chat_template`: messages, add_generation_prompt, bos_token,
eos_token, tools, plus any extra keyword; globals raise_exception(msg) and strftime_now(fmt); filter
tojson (ensure_ascii=False); trim_blocks and lstrip_blocks on; the loopcontrols extension and a
`{% generation %}` block (rendered as its body) for templates written for transformers' assistant masks.

When a model has no template (Gemma 3 270M has none), `fallback_template` picks one by vocabulary:
Gemma turns if `<start_of_turn>`/`<end_of_turn>` exist, ChatML if `<|im_start|>`/`<|im_end|>` exist,
otherwise a plain "User: ... / Assistant:" transcript.
"""
from __future__ import annotations

import json
import operator
from collections.abc import Callable, Container, Iterator, Mapping, Sequence
from datetime import datetime
from typing import Any

import jinja2
from jinja2 import nodes
from jinja2.compiler import CodeGenerator, Frame, optimizeconst
from jinja2.exceptions import SecurityError
from jinja2.ext import Extension
from jinja2.sandbox import ImmutableSandboxedEnvironment

from ..errors import TemplateError

MAX_OUTPUT_CHARS = 8 << 20      # a rendered prompt larger than this is a runaway template
MAX_RANGE_ITEMS = 1_000_000     # total items all range() calls of one render may yield
MAX_SEQUENCE_LEN = 1 << 22      # longest str/list that `*`, `+` or `~` may build


# Newlines are emitted from expressions ('\n' inside {{ }}) so the {%- -%} trimming cannot eat them.
GEMMA_TEMPLATE = r"""{{ bos_token }}
{%- if messages and messages[0]['role'] == 'system' -%}
    {%- set first_user_prefix = messages[0]['content'] + '\n\n' -%}
    {%- set loop_messages = messages[1:] -%}
{%- else -%}
    {%- set first_user_prefix = '' -%}
    {%- set loop_messages = messages -%}
{%- endif -%}
{%- for message in loop_messages -%}
    {%- set role = 'model' if message['role'] == 'assistant' else message['role'] -%}
    {{ '<start_of_turn>' + role + '\n' + (first_user_prefix if loop.first else '') }}
    {{- message['content'] | trim }}
    {{- '<end_of_turn>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<start_of_turn>model\n' }}
{%- endif -%}
"""
CHATML_TEMPLATE = r"""{%- for message in messages -%}
    {{ '<|im_start|>' + message['role'] + '\n' + message['content'] + '<|im_end|>\n' }}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ '<|im_start|>assistant\n' }}
{%- endif -%}
"""
PLAIN_TEMPLATE = r"""{%- for message in messages -%}
    {%- if message['role'] == 'system' -%}
        {{ message['content'] + '\n\n' }}
    {%- elif message['role'] == 'user' -%}
        {{ 'User: ' + message['content'] + '\n' }}
    {%- else -%}
        {{ 'Assistant: ' + message['content'] + '\n' }}
    {%- endif -%}
{%- endfor -%}
{%- if add_generation_prompt -%}
    {{ 'Assistant:' }}
{%- endif -%}
"""


def fallback_template(vocabulary: Container[str]) -> str:
    """The template to use when a model file has none, chosen by which turn tokens exist."""
    if "<start_of_turn>" in vocabulary and "<end_of_turn>" in vocabulary:
        return GEMMA_TEMPLATE
    if "<|im_start|>" in vocabulary and "<|im_end|>" in vocabulary:
        return CHATML_TEMPLATE
    return PLAIN_TEMPLATE


class _GenerationBlock(Extension):
    """transformers' `{% generation %}...{% endgeneration %}` (marks assistant text); renders the body."""
    tags = {"generation"}

    def parse(self, parser: Any) -> nodes.Node:
        lineno = next(parser.stream).lineno
        body = parser.parse_statements(("name:endgeneration",), drop_needle=True)
        return nodes.Scope(body, lineno=lineno)


class _Budget:
    """Per-render counter shared by the guarded builtins."""

    def __init__(self) -> None:
        self.range_items = 0


class _CodeGenerator(CodeGenerator):
    """Routes `~` through `environment.guarded_concat`, so string doubling in a loop is size-checked."""

    @optimizeconst
    def visit_Concat(self, node: nodes.Concat, frame: Frame) -> None:
        self.write("environment.guarded_concat((")
        for arg in node.nodes:
            self.visit(arg, frame)
            self.write(", ")
        self.write("))")


def _check_size(value: Any) -> Any:
    if isinstance(value, (str, list, tuple)) and len(value) > MAX_SEQUENCE_LEN:
        raise SecurityError(f"a template value grew to {len(value)} items (limit {MAX_SEQUENCE_LEN})")
    return value


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox with hard failures on unsafe access and size-checked `*`, `**`, `+` and `~`."""
    intercepted_binops = frozenset({"*", "**", "+"})
    code_generator_class = _CodeGenerator

    def guarded_concat(self, parts: Sequence[Any]) -> str:
        return _check_size("".join(map(str, parts)))

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        if operator_ == "**":
            if isinstance(right, (int, float)) and abs(right) > 64 and abs(left) not in (0, 1):
                raise SecurityError(f"exponent {right!r} is too large for a chat template")
            return left ** right
        if operator_ == "+":
            return _check_size(operator.add(left, right))
        for seq, n in ((left, right), (right, left)):
            if isinstance(seq, (str, list, tuple)) and isinstance(n, int) and len(seq) * n > MAX_SEQUENCE_LEN:
                raise SecurityError(f"repetition would build a sequence of {len(seq) * n} items")
        return operator.mul(left, right)


def _tojson(value: Any, indent: int | None = None, separators: tuple[str, str] | None = None,
            sort_keys: bool = False) -> str:
    return json.dumps(value, ensure_ascii=False, indent=indent, separators=separators, sort_keys=sort_keys)


def _raise_exception(message: str) -> None:
    raise TemplateError(f"chat template raised: {message}")


def _strftime_now(fmt: str) -> str:
    return datetime.now().strftime(fmt)


class ChatTemplate:
    """A compiled chat template. Construction fails with TemplateError on a syntax error."""

    def __init__(self, source: str, bos_token: str = "", eos_token: str = ""):
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self._env = _Environment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.DictLoader({}),
                                 extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
        self._env.filters["tojson"] = _tojson
        self._env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:
            self._template = self._env.from_string(source)
        except jinja2.TemplateSyntaxError as e:
            raise TemplateError(f"chat template has a syntax error at line {e.lineno}: {e.message}") from None
        except Exception as e:   # other compile-time failures of a foreign template
            raise TemplateError(f"chat template failed to compile: {type(e).__name__}: {e}") from None

    def render(self, messages: Sequence[Mapping[str, Any]], add_generation_prompt: bool = True,
               tools: Sequence[Mapping[str, Any]] | None = None, **extra: Any) -> str:
        """The prompt text for `messages`. Raises TemplateError for any failure inside the template."""
        budget = _Budget()
        variables = dict(extra, messages=list(messages), add_generation_prompt=add_generation_prompt,
                         tools=tools, bos_token=self.bos_token, eos_token=self.eos_token,
                         range=self._guarded_range(budget))
        try:
            return self._collect(self._template.generate(variables))
        except TemplateError:
            raise
        except SecurityError as e:
            raise TemplateError(f"chat template tried to escape the sandbox: {e}") from None
        except jinja2.TemplateNotFound as e:
            raise TemplateError(f"chat template tried to load {e.name!r}; import/include/extends are not "
                                "allowed") from None
        except RecursionError:
            raise TemplateError("chat template recursed too deeply") from None
        except Exception as e:   # the template is foreign code: any failure in it is a template error
            raise TemplateError(f"chat template failed to render: {type(e).__name__}: {e}") from None

    @staticmethod
    def _collect(chunks: Iterator[str]) -> str:
        out, size = [], 0
        for chunk in chunks:
            size += len(chunk)
            if size > MAX_OUTPUT_CHARS:
                raise SecurityError(f"rendered output exceeds {MAX_OUTPUT_CHARS} characters")
            out.append(chunk)
        return "".join(out)

    @staticmethod
    def _guarded_range(budget: _Budget) -> Callable[..., range]:
        def guarded_range(*args: int) -> range:
            r = range(*args)
            budget.range_items += len(r)
            if budget.range_items > MAX_RANGE_ITEMS:
                raise SecurityError(f"range() would yield more than {MAX_RANGE_ITEMS} items in one render")
            return r
        return guarded_range
