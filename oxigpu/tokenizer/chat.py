"""Chat templates: `tokenizer.chat_template` (Jinja2) rendered in a sandbox, HF transformers conventions.

Templates come from model files, i.e. from strangers, so they render in jinja2's
`ImmutableSandboxedEnvironment` with extra limits (values in `oxigpu.limits`):
* any access to an unsafe attribute (`__class__`, `__globals__`, `mro`, `func_globals`...) raises at once
  (jinja2 normally returns an undefined value that only fails when printed);
* `{% import %}`, `{% include %}`, `{% extends %}` find no templates (there is no file access);
* every operation that can build a value is size-checked *before* it runs, wherever the template reaches
  it: calls of methods, globals and macros (the sandbox's `call`), every filter and test (wrapped, so
  compile-time constant folding is covered too), the operators `*`, `**`, `+`, `%` and `~`, and printing.
  The estimate is generic: the sizes of all inputs (string lengths, items of containers counted deeply,
  integers as widths) summed, plus the product of the two largest (what `replace`, `join`, `expandtabs`,
  `indent`, `translate`... can amplify to); format strings (`str.format`, `%`, `|format`) count their
  widths and precisions. Anything over MAX_SEQUENCE_LEN is refused, so no intermediate string grows
  past it, and results are checked again after the call;
* `range()` has a budget over the whole render and the output is capped;
* a render (and a compile, which folds constants) that runs past MAX_RENDER_SECONDS is stopped by an
  exception raised in its thread, so loops that call nothing are bounded in time too.
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

import ctypes
import functools
import heapq
import json
import operator
import re
import string
import threading
import time
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
from ..limits import (
    MAX_INT_BITS,
    MAX_OUTPUT_CHARS,
    MAX_RANGE_ITEMS,
    MAX_RENDER_SECONDS,
    MAX_SEQUENCE_LEN,
    MAX_TEMPLATE_CHARS,
)

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


class _OverBudget(SecurityError):
    """A template operation would exceed one of the budgets of `oxigpu.limits`."""


def _size(value: Any, budget: int = MAX_SEQUENCE_LEN) -> int:
    """What `value` can contribute to a result: a string's length, an integer's magnitude (a width), a
    container's items and theirs (deeply). Counting stops once `budget` is passed, so a list holding
    the same huge list a million times costs no more than the budget to measure."""
    if isinstance(value, (str, bytes)):
        return len(value)
    if isinstance(value, bool) or value is None:
        return 0
    if isinstance(value, int):
        return abs(value) if value.bit_length() < 64 else budget + 1
    if isinstance(value, Mapping):
        items: Any = (x for kv in value.items() for x in kv)
        total = len(value)
    elif isinstance(value, (list, tuple, set, frozenset)):
        items, total = iter(value), len(value)
    else:
        return 0
    for item in items:
        if total > budget:
            break
        total += _size(item, budget - total)
    return total


# Operations whose result can be the product of two input sizes (the others build at most a few times
# the sum of their inputs: case changes, escaping, slicing, selecting): methods and filters alike.
_AMPLIFIERS = frozenset({"replace", "join", "expandtabs", "translate", "format", "format_map", "center", "ljust",
                         "rjust", "zfill", "indent", "wordwrap", "batch", "slice", "tojson", "pprint", "%"})


def _check_inputs(what: str, name: str, inputs: Sequence[Any]) -> None:
    """Refuse an operation that could build a value over MAX_SEQUENCE_LEN: the sum of its inputs' sizes, plus
    for amplifiers (`_AMPLIFIERS`) the product of the two largest."""
    sizes = sorted((_size(x) for x in inputs), reverse=True)
    bound = sum(sizes)
    if name in _AMPLIFIERS and len(sizes) > 1:
        bound += sizes[0] * sizes[1]
    if bound > MAX_SEQUENCE_LEN:
        raise _OverBudget(f"{what} could build a value of {bound} items (limit {MAX_SEQUENCE_LEN}, "
                            f"oxigpu.limits.MAX_SEQUENCE_LEN)")


def _check_size(value: Any, what: str = "an operation") -> Any:
    if isinstance(value, (str, bytes, list, tuple, dict, set, frozenset)) and len(value) > MAX_SEQUENCE_LEN:
        raise _OverBudget(f"{what} built a value of {len(value)} items (limit {MAX_SEQUENCE_LEN})")
    if isinstance(value, int) and value.bit_length() > MAX_INT_BITS:
        raise _OverBudget(f"{what} built an integer of {value.bit_length()} bits (limit {MAX_INT_BITS})")
    return value


_PERCENT_SPEC = re.compile(r"%(?:\([^)]*\))?[-#0 +]*(\d*|\*)(?:\.(\d*|\*))?")


def _check_format(fmt: Any, percent: bool) -> None:
    """Widths and precisions inside a format string (`{:>999999999}`, `%0999999999d`) build strings that
    large; they count against MAX_SEQUENCE_LEN like integer arguments."""
    if not isinstance(fmt, str):
        return
    if percent:
        numbers = [n for m in _PERCENT_SPEC.finditer(fmt) for n in m.groups() if n and n != "*"]
    else:
        numbers = []
        try:
            specs = [spec for _, _, spec, _ in string.Formatter().parse(fmt) if spec]
        except ValueError:
            return   # a malformed format string fails in the call itself
        while specs:
            spec = specs.pop()
            numbers += re.findall(r"\d+", spec)
    for n in numbers:
        if len(n) > 12 or int(n) > MAX_SEQUENCE_LEN:
            raise _OverBudget(f"a format width or precision of {n} exceeds the limit of {MAX_SEQUENCE_LEN} "
                                f"(oxigpu.limits.MAX_SEQUENCE_LEN)")


def _guard(kind: str, name: str, fn: Callable[..., Any]) -> Callable[..., Any]:
    """`fn` (a filter or test) with its inputs size-checked before and its result after."""
    what = f"{kind} {name!r}"

    @functools.wraps(fn)   # keeps jinja2's pass_context/pass_eval_context marks
    def guarded(*args: Any, **kwargs: Any) -> Any:
        _check_inputs(what, name, [*args, *kwargs.values()])
        if name == "format" and args:
            _check_format(args[0], percent=True)
        return _check_size(fn(*args, **kwargs), what)
    return guarded


def _no_lipsum(*args: Any, **kwargs: Any) -> str:
    raise SecurityError("lipsum() is not available in chat templates")


class _Timeout(BaseException):
    """Raised inside the rendering thread when the render runs past MAX_RENDER_SECONDS (a BaseException, so
    neither jinja2 nor the template's own error handling can swallow it)."""


class _Deadline:
    """Raise `_Timeout` in the calling thread after `seconds`, unless `cancel()` came first.

    Uses CPython's PyThreadState_SetAsyncExc: the exception lands at the next bytecode boundary, so pure-Python
    loops stop; single C-level operations are bounded by the size checks instead. One daemon thread watches
    every deadline of the process (a thread per render cost milliseconds)."""

    _lock = threading.Lock()
    _wake = threading.Condition(_lock)
    _pending: list[tuple[float, int, _Deadline]] = []   # a heap of (when, sequence, deadline)
    _watcher: threading.Thread | None = None
    _count = 0

    def __init__(self, seconds: float):
        self._tid = threading.get_ident()
        self._armed, self.fired = True, False
        cls = type(self)
        with cls._lock:
            cls._count += 1
            heapq.heappush(cls._pending, (time.monotonic() + seconds, cls._count, self))
            if cls._watcher is None:
                cls._watcher = threading.Thread(target=cls._watch, name="oxigpu-template-deadline", daemon=True)
                cls._watcher.start()
            cls._wake.notify()

    @classmethod
    def _watch(cls) -> None:
        with cls._lock:
            while True:
                while cls._pending and not cls._pending[0][2]._armed:
                    heapq.heappop(cls._pending)
                if not cls._pending:
                    cls._wake.wait()
                    continue
                when, _, deadline = cls._pending[0]
                left = when - time.monotonic()
                if left > 0:
                    cls._wake.wait(left)
                    continue
                heapq.heappop(cls._pending)
                deadline._armed, deadline.fired = False, True
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(deadline._tid),
                                                           ctypes.py_object(_Timeout))

    def cancel(self) -> None:
        with self._lock:
            self._armed = False
            if self.fired:   # fired but not delivered yet: withdraw it (NULL clears a pending async exception)
                ctypes.pythonapi.PyThreadState_SetAsyncExc(ctypes.c_ulong(self._tid), None)


def _within_deadline(what: str, fn: Callable[[], Any]) -> Any:
    """`fn()` stopped with a TemplateError once it runs past MAX_RENDER_SECONDS."""
    try:
        deadline = _Deadline(MAX_RENDER_SECONDS)
        try:
            return fn()
        finally:
            deadline.cancel()
    except _Timeout:
        raise TemplateError(f"chat template {what} ran past the limit of {MAX_RENDER_SECONDS} s "
                            f"(oxigpu.limits.MAX_RENDER_SECONDS)") from None


class _Environment(ImmutableSandboxedEnvironment):
    """The sandbox with hard failures on unsafe access and every value-building operation size-checked
    (module docstring)."""
    intercepted_binops = frozenset({"*", "**", "+", "%"})
    code_generator_class = _CodeGenerator

    def __init__(self, **options: Any):
        super().__init__(finalize=self._finalize, **options)
        for table, kind in ((self.filters, "filter"), (self.tests, "test")):
            for name, fn in list(table.items()):
                table[name] = _guard(kind, name, fn)
        self.globals["lipsum"] = _no_lipsum

    @staticmethod
    def _finalize(value: Any) -> Any:
        """Every printed value, before str() is taken of it (a list of huge strings would build one)."""
        if not isinstance(value, str):
            _check_inputs("printing a value", "print", [value])
        return value

    def guarded_concat(self, parts: Sequence[Any]) -> str:
        _check_inputs("operator '~'", "~", parts)
        return _check_size("".join(map(str, parts)), "operator '~'")

    def unsafe_undefined(self, obj: Any, attribute: str) -> jinja2.Undefined:
        raise SecurityError(f"access to attribute {attribute!r} of {type(obj).__name__!r} object is unsafe")

    def wrap_str_format(self, value: Any) -> Callable[..., str] | None:
        wrapper = super().wrap_str_format(value)
        if wrapper is None:
            return None

        def checked(*args: Any, **kwargs: Any) -> str:
            _check_format(value.__self__, percent=False)
            return wrapper(*args, **kwargs)
        checked.__name__ = value.__name__
        return checked

    def call(__self, __context: Any, __obj: Any, *args: Any, **kwargs: Any) -> Any:  # noqa: N805
        """Every call a template makes (methods, globals, macros), size-checked before and after."""
        name = getattr(__obj, "__name__", type(__obj).__name__)
        owner = getattr(__obj, "__self__", None)
        inputs = [*args, *kwargs.values()]
        if isinstance(owner, (str, bytes, list, tuple, dict)):
            inputs.append(owner)
        _check_inputs(f"calling {name}()", name, inputs)
        return _check_size(super().call(__context, __obj, *args, **kwargs), f"calling {name}()")

    def call_binop(self, context: Any, operator_: str, left: Any, right: Any) -> Any:
        op = f"operator {operator_!r}"
        ints = isinstance(left, int) and isinstance(right, int)
        if operator_ == "**":
            if isinstance(right, (int, float)) and abs(right) > 64 and abs(left) not in (0, 1):
                raise _OverBudget(f"exponent {right!r} is too large for a chat template")
            if ints and right > 0 and left.bit_length() * right > MAX_INT_BITS:
                raise _OverBudget(f"{op} would build an integer of {left.bit_length() * right} bits "
                                    f"(limit {MAX_INT_BITS})")
            return left ** right
        if operator_ == "*":
            if ints:
                if left.bit_length() + right.bit_length() > MAX_INT_BITS:
                    raise _OverBudget(f"{op} would build an integer of over {MAX_INT_BITS} bits")
            else:
                for seq, n in ((left, right), (right, left)):
                    if isinstance(seq, (str, list, tuple)) and isinstance(n, int) \
                            and len(seq) * n > MAX_SEQUENCE_LEN:
                        raise _OverBudget(f"repetition would build a sequence of {len(seq) * n} items "
                                            f"(limit {MAX_SEQUENCE_LEN})")
            return _check_size(operator.mul(left, right), op)
        if operator_ == "%" and isinstance(left, str):
            _check_format(left, percent=True)
            _check_inputs(op, "%", [left, right])
        elif operator_ == "+" and not ints:
            _check_inputs(op, "+", [left, right])
        return _check_size(self.binop_table[operator_](left, right), op)


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
        if not isinstance(source, str):
            raise TemplateError(f"tokenizer.chat_template must be a string, not {type(source).__name__}")
        if len(source) > MAX_TEMPLATE_CHARS:
            raise TemplateError(f"tokenizer.chat_template is {len(source)} characters long, over the limit of "
                                f"{MAX_TEMPLATE_CHARS} (oxigpu.limits.MAX_TEMPLATE_CHARS)")
        self.source = source
        self.bos_token, self.eos_token = bos_token, eos_token
        self._env = _Environment(trim_blocks=True, lstrip_blocks=True, loader=jinja2.DictLoader({}),
                                 extensions=["jinja2.ext.loopcontrols", _GenerationBlock])
        self._env.filters["tojson"] = _guard("filter", "tojson", _tojson)
        self._env.globals.update(raise_exception=_raise_exception, strftime_now=_strftime_now)
        try:   # compiling folds constant expressions, i.e. runs filters: size checks and the deadline apply
            self._template = _within_deadline("compile", lambda: self._env.from_string(source))
        except TemplateError:
            raise
        except _OverBudget as e:
            raise TemplateError(f"chat template exceeded a budget while compiling: {e}") from None
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
            return _within_deadline("render", lambda: self._collect(self._template.generate(variables)))
        except TemplateError:
            raise
        except _OverBudget as e:
            raise TemplateError(f"chat template exceeded a budget: {e}") from None
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
                raise _OverBudget(f"rendered output exceeds {MAX_OUTPUT_CHARS} characters")
            out.append(chunk)
        return "".join(out)

    @staticmethod
    def _guarded_range(budget: _Budget) -> Callable[..., range]:
        def guarded_range(*args: int) -> range:
            r = range(*args)
            budget.range_items += len(r)
            if budget.range_items > MAX_RANGE_ITEMS:
                raise _OverBudget(f"range() would yield more than {MAX_RANGE_ITEMS} items in one render")
            return r
        guarded_range.__name__ = "range"
        return guarded_range
