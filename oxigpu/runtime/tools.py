"""Tool calling: tools into the chat prompt, the model's calls out of its output.

Two formats, chosen by the model's chat template:

* **hermes** -- templates that render ``tools`` themselves (Qwen2.5, Hermes, and the many that copy them):
  the template gets the tools, the model writes each call as ``<tool_call>{"name": ..., "arguments":
  {...}}</tool_call>``, and those blocks are parsed out of its text. Earlier calls are rendered back
  through the template (``arguments`` as objects) and tool results as ``role: "tool"`` messages.
* **generic** -- templates that know nothing of tools: the tools and the answer format go into the system
  prompt, and the whole reply is schema-constrained JSON, ``{"tool_calls": [{"name", "arguments"}]}`` or
  ``{"response": "..."}``, so it always parses. Tool results are given back as user turns.

``tool_choice``: "auto" (the default: the model decides), "none" (no tools offered), "required" (at least
one call) or ``{"type": "function", "function": {"name": ...}}`` (that function). With "required" or a
named function the call is constrained by a grammar built from the tools' JSON Schemas (hermes: the
``<tool_call>`` block around a schema-constrained object), so it always parses and its arguments always
validate.
"""
from __future__ import annotations

import json
import re
import secrets
from collections.abc import Mapping, Sequence
from dataclasses import dataclass, replace
from typing import Any

from ..errors import InvalidParameterError
from .params import GenerationResult, ToolCall

_HERMES_CALL = re.compile(r"<tool_call>\s*(\{.*?\})\s*(?:</tool_call>|$)", re.DOTALL)
GENERIC_INSTRUCTIONS = (
    "You can call these tools (JSON Schema of their arguments given):\n{tools}\n\n"
    'Reply with one JSON object: either {{"tool_calls": [{{"name": <tool name>, "arguments": <arguments '
    'object>}}]}} to call tools, or {{"response": <your answer>}} to answer the user.')


def check_tools(tools: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Tools in OpenAI's shape ({"type": "function", "function": {"name", "description"?, "parameters"?}}),
    validated; a bare {"name", ...} function is accepted too."""
    if isinstance(tools, (str, bytes, Mapping)) or not isinstance(tools, Sequence):
        raise InvalidParameterError("tools must be a list of {'type': 'function', 'function': {...}} objects")
    out, names = [], set()
    for i, t in enumerate(tools):
        if not isinstance(t, Mapping):
            raise InvalidParameterError(f"tools[{i}] must be an object, got {type(t).__name__}")
        fn = t.get("function", t) if t.get("type", "function") == "function" else None
        if not isinstance(fn, Mapping):
            raise InvalidParameterError(f"tools[{i}] must be a function tool ({{'type': 'function', "
                                        f"'function': {{'name': ...}}}})")
        name = fn.get("name")
        if not isinstance(name, str) or not re.fullmatch(r"[A-Za-z0-9_.-]{1,64}", name):
            raise InvalidParameterError(f"tools[{i}].function.name must be 1-64 letters, digits, '_', '.' or "
                                        f"'-', got {name!r}")
        if name in names:
            raise InvalidParameterError(f"two tools are named {name!r}")
        names.add(name)
        params = fn.get("parameters", {"type": "object", "properties": {}})
        if not isinstance(params, Mapping):
            raise InvalidParameterError(f"tools[{i}].function.parameters must be a JSON Schema object")
        entry = {"name": name, "parameters": dict(params)}
        if fn.get("description") is not None:
            entry["description"] = str(fn["description"])
        out.append({"type": "function", "function": entry})
    return out


def check_tool_choice(tool_choice: Any, tools: Sequence[Mapping[str, Any]]) -> str:
    """"auto", "none", "required" or the name of the function to call."""
    if tool_choice is None:
        return "auto"
    if tool_choice in ("auto", "none", "required"):
        return tool_choice
    if isinstance(tool_choice, Mapping):
        fn = tool_choice.get("function")
        name = fn.get("name") if isinstance(fn, Mapping) else tool_choice.get("name")
        if any(t["function"]["name"] == name for t in tools):
            return name
        raise InvalidParameterError(f"tool_choice names {name!r}, which is not among the tools")
    raise InvalidParameterError(f"tool_choice must be 'auto', 'none', 'required' or "
                                f"{{'type': 'function', 'function': {{'name': ...}}}}, got {tool_choice!r}")


def _call_schema(tool: Mapping[str, Any]) -> dict[str, Any]:
    fn = tool["function"]
    return {"type": "object", "properties": {"name": {"const": fn["name"]}, "arguments": fn["parameters"]},
            "required": ["name", "arguments"], "additionalProperties": False}


def _calls_schema(tools: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    schemas = [_call_schema(t) for t in tools]
    return schemas[0] if len(schemas) == 1 else {"anyOf": schemas}


def _arguments(value: Any) -> Any:
    if isinstance(value, str):
        try:
            return json.loads(value)
        except json.JSONDecodeError:
            return value
    return value


@dataclass
class ChatPlan:
    """How one chat with tools runs: the messages and tools the template renders, the constraint the
    reply is generated under (SamplingParams overrides), and how the reply is read back."""

    format: str                                  # "hermes", "generic" or "none" (no calls expected)
    messages: list[dict[str, Any]]
    tools: list[dict[str, Any]] | None
    constraint: dict[str, Any]
    names: tuple[str, ...] = ()                  # the functions the reply may call

    def finish(self, result: GenerationResult) -> GenerationResult:
        """``result`` with the calls its text holds as ``tool_calls`` (finish_reason "tool_calls")."""
        if self.format == "none":
            return result
        content, calls = parse_tool_calls(result.text, self.format, self.names)
        if not calls:
            return replace(result, text=content) if self.format == "generic" else result
        reason = result.finish_reason if result.finish_reason == "length" else "tool_calls"
        return replace(result, text=content, tool_calls=tuple(calls), finish_reason=reason)


def plan_chat(messages: Sequence[Mapping[str, Any]], tools: Sequence[Mapping[str, Any]] | None,
              tool_choice: Any, template_source: str) -> ChatPlan:
    """The plan for a chat: ``template_source`` decides the format (see the module docstring)."""
    if not tools:
        if tool_choice not in (None, "auto", "none"):
            raise InvalidParameterError("tool_choice needs tools")
        return ChatPlan("none", _hermes_messages(messages), None, {})
    tools = check_tools(tools)
    choice = check_tool_choice(tool_choice, tools)
    hermes = re.search(r"\btools\b", template_source) is not None
    if choice == "none":      # the history still renders its calls and results; the reply is not parsed
        return (ChatPlan("none", _hermes_messages(messages), tools, {}) if hermes else
                ChatPlan("none", _generic_messages(messages), None, {}))
    offered = tools if choice in ("auto", "required") else [t for t in tools if t["function"]["name"] == choice]
    names = tuple(t["function"]["name"] for t in offered)
    if hermes:
        constraint = {}
        if choice != "auto":
            block = '"<tool_call>\\n" %json ' + json.dumps(_calls_schema(offered)) + ' "\\n</tool_call>"'
            constraint = {"grammar": f'start: call ("\\n" call)*\ncall: {block}\n'}
        return ChatPlan("hermes", _hermes_messages(messages), tools, constraint, names)
    calls = {"type": "object", "properties": {"tool_calls": {"type": "array", "minItems": 1, "maxItems": 8,
                                                             "items": _calls_schema(offered)}},
             "required": ["tool_calls"], "additionalProperties": False}
    answer = {"type": "object", "properties": {"response": {"type": "string"}}, "required": ["response"],
              "additionalProperties": False}
    schema = calls if choice != "auto" else {"anyOf": [calls, answer]}
    text = GENERIC_INSTRUCTIONS.format(tools="\n".join(json.dumps(t["function"]) for t in tools))
    msgs = _generic_messages(messages)
    if msgs and msgs[0]["role"] == "system":
        msgs[0] = {**msgs[0], "content": msgs[0]["content"] + "\n\n" + text}
    else:
        msgs.insert(0, {"role": "system", "content": text})
    return ChatPlan("generic", msgs, None, {"json_schema": schema}, names)


def _hermes_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template that renders tool calls: arguments as objects (templates ``tojson`` them)."""
    out = []
    for m in messages:
        m = dict(m)
        if m.get("tool_calls"):
            m["tool_calls"] = [{**c, "function": {**c["function"], "arguments": _arguments(c["function"].get(
                "arguments", {}))}} if isinstance(c.get("function"), Mapping) else c for c in m["tool_calls"]]
            m["content"] = m.get("content") or ""
        out.append(m)
    return out


def _generic_messages(messages: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Messages for a template without tools: calls as the JSON the model would write, results as user
    turns."""
    out: list[dict[str, Any]] = []
    names: dict[str, str] = {}
    for m in messages:
        if m.get("role") == "assistant" and m.get("tool_calls"):
            calls = []
            for c in m["tool_calls"]:
                fn = c.get("function", c)
                names[str(c.get("id", ""))] = fn.get("name", "")
                calls.append({"name": fn.get("name"), "arguments": _arguments(fn.get("arguments", {}))})
            out.append({"role": "assistant", "content": json.dumps({"tool_calls": calls})})
        elif m.get("role") == "tool":
            name = m.get("name") or names.get(str(m.get("tool_call_id", "")), "")
            head = f"Result of tool {name}:" if name else "Tool result:"
            out.append({"role": "user", "content": f"{head}\n{m.get('content') or ''}"})
        else:
            out.append({"role": m["role"], "content": m.get("content") or ""})
    return out


def parse_tool_calls(text: str, fmt: str = "hermes", names: Sequence[str] = ()) -> tuple[str, list[ToolCall]]:
    """(the text besides the calls, the calls) of a model's reply in ``fmt``. A hermes reply without
    ``<tool_call>`` blocks may still call a tool the way small models often do: one JSON object (or a
    list of them) {"name": <one of ``names``>, "arguments": {...}}, bare or in a ```json fence."""
    calls: list[ToolCall] = []
    if fmt == "generic":
        try:
            obj = json.loads(text)
        except json.JSONDecodeError:
            return text, []
        if isinstance(obj, dict) and isinstance(obj.get("tool_calls"), list):
            for c in obj["tool_calls"]:
                if isinstance(c, dict) and isinstance(c.get("name"), str):
                    calls.append(_call(c["name"], c.get("arguments", {})))
            return "", calls
        if isinstance(obj, dict) and isinstance(obj.get("response"), str):
            return obj["response"], []
        return text, []
    kept, last = [], 0
    for m in _HERMES_CALL.finditer(text):
        try:
            obj = json.loads(m.group(1))
        except json.JSONDecodeError:
            continue
        if isinstance(obj, dict) and isinstance(obj.get("name"), str):
            calls.append(_call(obj["name"], _arguments(obj.get("arguments", {}))))
            kept.append(text[last:m.start()])
            last = m.end()
    kept.append(text[last:])
    if calls:
        return "".join(kept).strip(), calls
    fenced = re.fullmatch(r"\s*(?:```(?:json)?\s*)?(.*?)(?:\s*```)?\s*", text, re.DOTALL)
    try:
        obj = json.loads(fenced.group(1) if fenced else text)
    except json.JSONDecodeError:
        return text, []
    objs = obj if isinstance(obj, list) else [obj]
    if objs and all(isinstance(o, dict) and o.get("name") in names and isinstance(o.get("arguments", {}), (dict, str))
                    for o in objs):
        return "", [_call(o["name"], _arguments(o.get("arguments", {}))) for o in objs]
    return text, []


def _call(name: str, arguments: Any) -> ToolCall:
    args = arguments if isinstance(arguments, str) else json.dumps(arguments, ensure_ascii=False)
    return ToolCall(f"call_{secrets.token_hex(12)}", name, args)


class _CallScanner:
    """Reads JSON text a piece at a time and reports the tool calls in it as they are written: each call
    object at nesting ``depth`` (1: the text is the call; 3: calls in ``{"tool_calls": [...]}``) gives its
    ``name`` once that string is complete and then its ``arguments`` value's raw text as it grows. A call
    whose arguments come before its name is reported whole when its object closes."""

    def __init__(self, depth: int):
        self.depth = depth
        self.stack: list[str] = []               # "o" / "a" per open container
        self.expect_key: list[bool] = []
        self.key: list[str | None] = []          # the last key of each open object
        self.in_string = self.escape = self.is_key = False
        self.buf: list[str] = []
        self.calls: list[dict[str, Any]] = []    # {"name": str | None, "args": str, "open": bool}
        self.arg: dict[str, Any] | None = None   # the call whose arguments value is being written
        self.arg_kind = ""                       # "s" string, "c" container, "p" primitive
        self.done = False                        # the outermost value closed

    def feed(self, text: str) -> None:
        for ch in text:
            if self.done:
                return
            self._char(ch)

    def _char(self, ch: str) -> None:
        d = len(self.stack)
        arg = self.arg
        if arg is not None and self.arg_kind == "p" and not self.in_string and ch in ",}] \t\r\n":
            self.arg = arg = None                 # a number / true / false / null ended
        if arg is not None:
            arg["args"] += ch
        if self.in_string:
            if self.escape:
                self.escape = False
                self.buf.append(ch)
            elif ch == "\\":
                self.escape = True
                self.buf.append(ch)
            elif ch == '"':
                self.in_string = False
                self._string_done(json.loads('"' + "".join(self.buf) + '"'))
            else:
                self.buf.append(ch)
            return
        if ch in " \t\r\n":
            return
        if arg is None and d == self.depth and self.stack[-1] == "o" and self.key[-1] == "arguments" \
                and not self.expect_key[-1] and self.calls and self.calls[-1]["open"] and not self.calls[-1]["args"]:
            # the arguments value starts here
            self.arg = arg = self.calls[-1]
            arg["args"] = ch
            self.arg_kind = "s" if ch == '"' else "c" if ch in "{[" else "p"
        if ch == '"':
            self.in_string, self.buf = True, []
            self.is_key = bool(self.stack) and self.stack[-1] == "o" and self.expect_key[-1]
        elif ch in "{[":
            self.stack.append("o" if ch == "{" else "a")
            self.expect_key.append(ch == "{")
            self.key.append(None)
            if ch == "{" and len(self.stack) == self.depth:
                self.calls.append({"name": None, "args": "", "open": True})
        elif ch in "}]":
            if len(self.stack) == self.depth and ch == "}" and self.calls:
                self.calls[-1]["open"] = False
            self.stack.pop()
            self.expect_key.pop()
            self.key.pop()
            if arg is not None and self.arg_kind == "c" and len(self.stack) == self.depth:
                self.arg = None
            if not self.stack:
                self.done = True
        elif ch == ":" and self.stack:
            self.expect_key[-1] = False
        elif ch == "," and self.stack and self.stack[-1] == "o":
            self.expect_key[-1] = True

    def _string_done(self, value: str) -> None:
        if self.is_key:
            self.key[-1] = value
            return
        if self.arg is not None and self.arg_kind == "s" and len(self.stack) == self.depth:
            self.arg = None
        if len(self.stack) == self.depth and self.key and self.key[-1] == "name" and self.calls \
                and self.calls[-1]["open"] and self.calls[-1]["name"] is None:
            self.calls[-1]["name"] = value


@dataclass
class ToolCallDelta:
    """One piece of a streamed tool call: its first (``id`` and ``name``, arguments "") or a fragment of its
    arguments' JSON text (``arguments``)."""

    index: int
    id: str | None = None
    name: str | None = None
    arguments: str = ""


class ToolCallStream:
    """A reply's tool calls as the model writes them, for streaming (OpenAI's ``tool_calls`` deltas): the
    text outside the calls' markup as content, each call's id and name once its name is written, then its
    arguments' JSON text piece by piece. ``feed`` each text piece, then ``finish`` with the result's parsed
    calls: calls the stream could not follow (a bare JSON call, arguments before the name) come out whole
    there. The arguments sent are the model's own JSON text (the non-streamed reply re-serializes it)."""

    def __init__(self, fmt: str):
        self.fmt = fmt
        self.text = ""
        self.pos = 0                             # hermes: text before this was handled
        self.scanner: _CallScanner | None = _CallScanner(3) if fmt == "generic" else None
        self.scanners: list[_CallScanner] = []   # hermes: one per <tool_call> block, in order
        self.sent: list[tuple[str, int]] = []    # per call started: (id, arguments characters sent)
        self.held = fmt == "generic"             # content kept back (a generic reply, or a bare JSON call)
        self.content = ""                        # content sent

    def feed(self, piece: str) -> tuple[str, list[ToolCallDelta]]:
        """(content to send, call deltas to send) after ``piece``."""
        self.text += piece
        content = ""
        if self.fmt == "generic":
            assert self.scanner is not None
            self.scanner.feed(piece)
            return "", self._deltas([self.scanner])
        if not self.scanners and not self.held and self.text.lstrip()[:1] in ("{", "[", "`"):
            self.held = True                     # perhaps a bare JSON call: the final parse decides
        while True:
            if self.scanners and not self.scanners[-1].done:
                sc = self.scanners[-1]
                rest = self.text[self.pos:]
                sc.feed(rest)
                self.pos = len(self.text)
                if not sc.done:
                    break
                continue
            if self.scanners:                    # after a call's JSON: skip to its end tag
                end = self.text.find("</tool_call>", self.pos)
                if end < 0 and self.text.find("<tool_call>", self.pos) < 0:
                    break
                if end >= 0:
                    self.pos = end + len("</tool_call>")
            start = self.text.find("<tool_call>", self.pos)
            if start < 0:
                keep = _tag_prefix(self.text, self.pos)
                if not self.held and not self.scanners:
                    content += self.text[self.pos:keep]
                    self.pos = keep
                break
            if not self.held and not self.scanners:
                content += self.text[self.pos:start]
            self.pos = start + len("<tool_call>")
            self.scanners.append(_CallScanner(1))
        if not self.content:
            content = content.lstrip()           # the parsed reply's text is stripped too
        self.content += content
        return content, self._deltas(self.scanners)

    def _deltas(self, scanners: list[_CallScanner]) -> list[ToolCallDelta]:
        out = []
        calls = [c for sc in scanners for c in sc.calls]
        for i, c in enumerate(calls):
            if c["name"] is None:
                continue
            if i == len(self.sent):
                self.sent.append((f"call_{secrets.token_hex(12)}", 0))
                out.append(ToolCallDelta(i, self.sent[i][0], c["name"]))
            if i < len(self.sent):
                cid, n = self.sent[i]
                if len(c["args"]) > n:
                    out.append(ToolCallDelta(i, arguments=c["args"][n:]))
                    self.sent[i] = (cid, len(c["args"]))
        return out

    def finish(self, result: GenerationResult) -> tuple[str, list[ToolCallDelta]]:
        """(content not sent yet, call deltas not sent yet) at the end of the reply (``result``: the reply
        with its calls parsed, ``ChatPlan.finish``)."""
        if self.sent:                            # the text besides the calls, less what was sent
            sent = self.content
            return (result.text[len(sent):] if result.text.startswith(sent) else ""), []
        calls = [ToolCallDelta(j, c.id, c.name, c.arguments) for j, c in enumerate(result.tool_calls)]
        if self.held or self.fmt == "generic":
            return result.text, calls
        return self.text[self.pos:] if not result.tool_calls else "", calls


def _tag_prefix(text: str, start: int) -> int:
    """Where a possible beginning of ``<tool_call>`` at the end of ``text`` starts (len(text): none)."""
    tag = "<tool_call>"
    for k in range(min(len(tag) - 1, len(text) - start), 0, -1):
        if text.endswith(tag[:k]):
            return len(text) - k
    return len(text)
