"""The OpenAI-compatible server over real HTTP: uvicorn on 127.0.0.1 (a free port, in a thread; `oxigpu serve`
in a subprocess once), driven by the official `openai` client and by raw HTTP where the client would hide
the wire (SSE framing, malformed bodies, headers, disconnects). Outputs are checked against `LLM` on the same
model with the same settings; wire shapes against JSON schemas of OpenAI's objects.

A tiny synthetic model (numpy) carries the protocol checks; tests marked realmodel run gemma3 270M and
Qwen2.5-Coder 0.5B, and one test runs the wgpu backend (lavapipe in CI).
"""
from __future__ import annotations

import http.client
import json
import os
import re
import signal
import socket
import subprocess
import sys
import threading
import time
from pathlib import Path

import jsonschema
import openai
import pytest
from prometheus_client.parser import text_string_to_metric_families

from oxigpu import LLM
from oxigpu.aio import AsyncLLM
from oxigpu.errors import DeviceError, OxigpuError
from oxigpu.server import BackgroundServer, ServerConfig

N_CTX = 512
KEY = "test-key-0123456789"
MESSAGES = [{"role": "system", "content": "You are terse."}, {"role": "user", "content": "Name a colour."}]

# -- OpenAI's objects, as far as a client relies on them ---------------------------------------------------
_USAGE = {"type": "object", "required": ["prompt_tokens", "completion_tokens", "total_tokens"],
          "properties": {k: {"type": "integer", "minimum": 0}
                         for k in ("prompt_tokens", "completion_tokens", "total_tokens")}}
_FINISH = {"enum": [None, "stop", "length", "tool_calls"]}
_HEAD = {"id": {"type": "string", "minLength": 1}, "created": {"type": "integer"}, "model": {"type": "string"}}
CHAT_COMPLETION = {
    "type": "object", "required": ["id", "object", "created", "model", "choices", "usage"],
    "properties": {**_HEAD, "object": {"const": "chat.completion"}, "usage": _USAGE, "choices": {
        "type": "array", "minItems": 1, "items": {
            "type": "object", "required": ["index", "message", "finish_reason"],
            "properties": {"index": {"type": "integer"}, "finish_reason": {"enum": ["stop", "length"]},
                           "message": {"type": "object", "required": ["role", "content"],
                                       "properties": {"role": {"const": "assistant"},
                                                      "content": {"type": "string"}}}}}}}}
CHAT_CHUNK = {
    "type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {**_HEAD, "object": {"const": "chat.completion.chunk"},
                   "usage": {"anyOf": [{"type": "null"}, _USAGE]}, "choices": {
                       "type": "array", "items": {
                           "type": "object", "required": ["index", "delta", "finish_reason"],
                           "properties": {"index": {"type": "integer"}, "finish_reason": _FINISH,
                                          "delta": {"type": "object", "additionalProperties": False,
                                                    "properties": {"role": {"const": "assistant"},
                                                                   "content": {"type": ["string", "null"]}}}}}}}}
COMPLETION = {
    "type": "object", "required": ["id", "object", "created", "model", "choices"],
    "properties": {**_HEAD, "object": {"const": "text_completion"},
                   "usage": {"anyOf": [{"type": "null"}, _USAGE]}, "choices": {
                       "type": "array", "items": {
                           "type": "object", "required": ["index", "text", "finish_reason"],
                           "properties": {"index": {"type": "integer"}, "text": {"type": "string"},
                                          "finish_reason": _FINISH}}}}}
ERROR = {"type": "object", "required": ["error"], "additionalProperties": False, "properties": {"error": {
    "type": "object", "required": ["message", "type", "param", "code"], "additionalProperties": False,
    "properties": {"message": {"type": "string", "minLength": 1}, "type": {"type": "string"},
                   "param": {"type": ["string", "null"]}, "code": {"type": ["string", "null"]}}}}}


# -- servers and helpers ---------------------------------------------------------------------------------
@pytest.fixture(scope="session")
def tiny_path(tiny_models) -> str:
    return tiny_models["tiny-qwen2"]


@pytest.fixture(scope="session")
def ref(tiny_path) -> LLM:
    return LLM(tiny_path, backend="numpy", n_ctx=N_CTX)


@pytest.fixture(scope="session")
def server(tiny_path):
    """No key, defaults otherwise; 32 sequences at once so concurrent clients interleave."""
    with BackgroundServer(lambda: AsyncLLM(tiny_path, backend="numpy", n_ctx=N_CTX, max_seqs=32)) as s:
        yield s


@pytest.fixture(scope="session")
def strict(tiny_path):
    """An API key, a 64 KiB body limit, one sequence with two waiting, a 2 s timeout."""
    config = ServerConfig(api_key=KEY, max_body=64 * 1024, request_timeout=2.0)
    with BackgroundServer(lambda: AsyncLLM(tiny_path, backend="numpy", n_ctx=4096, max_seqs=1, max_queue=2),
                          config) as s:
        yield s


@pytest.fixture(scope="session")
def client(server) -> openai.OpenAI:
    return openai.OpenAI(base_url=server.base_url, api_key="unused", max_retries=0, timeout=120)


def _addr(server) -> tuple[str, int]:
    host, port = server.url.removeprefix("http://").rsplit(":", 1)
    return host, int(port)


def call(server, method: str, path: str, body=None, *, raw: bytes | None = None, key: str | None = None,
         headers: dict | None = None) -> tuple[int, dict, bytes]:
    """One HTTP request with http.client: (status, headers, body)."""
    conn = http.client.HTTPConnection(*_addr(server), timeout=120)
    data = raw if raw is not None else None if body is None else json.dumps(body).encode()
    h = {"Content-Type": "application/json", **(headers or {})}
    if key is not None:
        h["Authorization"] = f"Bearer {key}"
    try:
        conn.request(method, path, body=data, headers=h)
        resp = conn.getresponse()
        return resp.status, {k.lower(): v for k, v in resp.getheaders()}, resp.read()
    finally:
        conn.close()


def error_of(status: int, body: bytes, expected_status: int = 400) -> dict:
    assert status == expected_status, body
    payload = json.loads(body)
    jsonschema.validate(payload, ERROR)
    return payload["error"]


def sse(server, path: str, body: dict, key: str | None = None) -> list[dict | str]:
    """A streamed response's events: parsed JSON objects, and "[DONE]"."""
    status, headers, raw = call(server, "POST", path, {**body, "stream": True}, key=key)
    assert status == 200, raw
    assert headers["content-type"].startswith("text/event-stream")
    events = []
    for block in raw.decode().split("\n\n"):
        if block:
            assert block.startswith("data: "), block
            payload = block[len("data: "):]
            events.append(payload if payload == "[DONE]" else json.loads(payload))
    return events


def metrics(server, key: str | None = None) -> dict[str, float]:
    """The server's Prometheus samples by name (labels joined in), e.g. 'oxigpu_running_sequences'."""
    status, _, body = call(server, "GET", "/metrics", key=key)
    assert status == 200
    out = {}
    for family in text_string_to_metric_families(body.decode()):
        for s in family.samples:
            labels = ",".join(f"{k}={v}" for k, v in sorted(s.labels.items()))
            out[s.name + (f"{{{labels}}}" if labels else "")] = s.value
    return out


def wait_idle(server, key: str | None = None, seconds: float = 30.0) -> dict[str, float]:
    """Poll /metrics until no sequence runs or waits; return the samples then."""
    deadline = time.monotonic() + seconds
    while True:
        m = metrics(server, key)
        if m["oxigpu_running_sequences"] == 0 and m["oxigpu_queue_depth"] == 0:
            return m
        assert time.monotonic() < deadline, m
        time.sleep(0.02)


def no_eog(llm: LLM) -> dict[str, float]:
    """OpenAI logit_bias banning every end-of-generation token, so a run lasts its max_tokens."""
    return {str(t): -100 for t in llm.tokenizer.eog_ids}


# -- informational routes --------------------------------------------------------------------------------
def test_models_health_and_tokenize(server, client, ref):
    assert [m.id for m in client.models.list().data] == ["tiny-qwen2"]
    assert call(server, "GET", "/v1/models/tiny-qwen2")[0] == 200
    assert error_of(*call(server, "GET", "/v1/models/other")[::2], 404)["code"] == "model_not_found"
    assert json.loads(call(server, "GET", "/health")[2]) == {"status": "ok"}
    text = "Hello, wörld: ünïcode"
    status, _, body = call(server, "POST", "/tokenize", {"content": text})
    ids = json.loads(body)["tokens"]
    assert status == 200 and ids == ref.tokenize(text, add_special=False)
    assert json.loads(call(server, "POST", "/tokenize", {"content": text, "add_special": True})[2])["tokens"] \
        == ref.tokenize(text)
    pieces = json.loads(call(server, "POST", "/tokenize", {"content": text, "with_pieces": True})[2])["tokens"]
    assert [p["id"] for p in pieces] == ids
    # pieces are strings, or the bytes of a split character: together they are the text
    assert b"".join(p["piece"].encode() if isinstance(p["piece"], str) else bytes(p["piece"])
                    for p in pieces).decode() == text
    assert json.loads(call(server, "POST", "/detokenize", {"tokens": ids})[2]) == {"content": text}
    assert error_of(*call(server, "POST", "/detokenize", {"tokens": [10**9]})[::2])["param"] == "tokens"
    err = error_of(*call(server, "POST", "/v1/embeddings", {"input": "hi", "model": "x"})[::2])
    assert "not an embedding model" in err["message"] and err["code"] == "model_not_embedding"


# -- generation: same output as LLM, exact usage ---------------------------------------------------------
def test_chat_equals_llm_chat_with_exact_usage(server, client, ref):
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=8)
    r = client.chat.completions.create(model="any", messages=MESSAGES, max_tokens=8, temperature=0)
    assert r.choices[0].message.content == expected.text
    assert r.choices[0].finish_reason == expected.finish_reason
    n_prompt = len(ref.chat_prompt(MESSAGES))
    assert (r.usage.prompt_tokens, r.usage.completion_tokens, r.usage.total_tokens) == \
        (n_prompt, len(expected.token_ids), n_prompt + len(expected.token_ids))
    assert r.model == "tiny-qwen2" and r.object == "chat.completion"
    # the raw body, as OpenAI documents it; max_completion_tokens is max_tokens' newer name
    status, _, body = call(server, "POST", "/v1/chat/completions",
                           {"messages": MESSAGES, "max_completion_tokens": 8, "temperature": 0})
    assert status == 200
    jsonschema.validate(json.loads(body), CHAT_COMPLETION)
    assert json.loads(body)["choices"][0]["message"]["content"] == expected.text


def test_streaming_chat_equals_non_streaming(server, client, ref):
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=10)
    events = sse(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 10, "temperature": 0,
                                                  "stream_options": {"include_usage": True}})
    assert events[-1] == "[DONE]"
    chunks = events[:-1]
    for c in chunks:
        jsonschema.validate(c, CHAT_CHUNK)
    assert len({c["id"] for c in chunks}) == 1
    assert chunks[0]["choices"][0]["delta"] == {"role": "assistant", "content": ""}
    assert "".join(c["choices"][0]["delta"].get("content") or "" for c in chunks if c["choices"]) == expected.text
    assert [c["choices"][0]["finish_reason"] for c in chunks if c["choices"]][-1] == expected.finish_reason
    assert chunks[-1]["choices"] == [] and chunks[-1]["usage"]["completion_tokens"] == len(expected.token_ids)
    assert all(c["usage"] is None for c in chunks[:-1])
    # the same through the client
    stream = client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=10, temperature=0,
                                            stream=True)
    assert "".join(c.choices[0].delta.content or "" for c in stream if c.choices) == expected.text
    # n=2 streamed: chunks of both choices interleave, each whole and finished once
    events = sse(server, "/v1/chat/completions", {"messages": MESSAGES, "max_tokens": 10, "temperature": 0, "n": 2})
    text, finish = {0: "", 1: ""}, {0: [], 1: []}
    for c in events[:-1]:
        jsonschema.validate(c, CHAT_CHUNK)
        (choice,) = c["choices"]
        text[choice["index"]] += choice["delta"].get("content") or ""
        if choice["finish_reason"]:
            finish[choice["index"]].append(choice["finish_reason"])
    assert text == {0: expected.text, 1: expected.text}
    assert finish == {0: [expected.finish_reason], 1: [expected.finish_reason]}


def test_stream_continuous_usage_counts_every_chunk(server, client, ref):
    """vLLM's stream option continuous_usage_stats: every chunk carries the usage so far (through the real
    client), rising to exactly the final count; the text is unchanged by it."""
    bias = {int(t): -100.0 for t in ref.tokenizer.eog_ids}
    expected = ref.generate("Once upon", temperature=0.0, max_tokens=12, logit_bias=bias)
    stream = client.completions.create(model="x", prompt="Once upon", max_tokens=12, temperature=0, stream=True,
                                       stream_options={"include_usage": True, "continuous_usage_stats": True},
                                       logit_bias=no_eog(ref))
    chunks = list(stream)
    counts = [c.usage.completion_tokens for c in chunks]
    assert all(c.usage is not None and c.usage.prompt_tokens == chunks[-1].usage.prompt_tokens for c in chunks)
    assert counts == sorted(counts) and counts[-1] == len(expected.token_ids) == 12 and counts[0] >= 1
    assert "".join(c.choices[0].text for c in chunks if c.choices) == expected.text


def test_completions_seeded_sampling_equals_llm_generate(server, client, ref):
    settings = {"temperature": 1.3, "top_p": 0.9, "max_tokens": 10}
    prompt = "Once upon a time"
    expected = [ref.generate(prompt, seed=s, top_k=0, min_p=0.0, **settings) for s in (77, 78)]
    r = client.completions.create(model="x", prompt=prompt, seed=77, n=2, **settings)
    assert [c.text for c in r.choices] == [e.text for e in expected]       # choice i samples with seed + i
    again = client.completions.create(model="x", prompt=prompt, seed=77, **settings)
    assert again.choices[0].text == expected[0].text
    assert r.usage.completion_tokens == sum(len(e.token_ids) for e in expected)
    assert r.usage.prompt_tokens == len(ref.tokenize(prompt))
    # streamed, the same text in order, and the extensions (top_k, min_p, repeat_penalty) are honoured
    stream = client.completions.create(model="x", prompt=prompt, seed=77, stream=True, **settings)
    assert "".join(c.choices[0].text for c in stream) == expected[0].text
    ext = {"top_k": 5, "min_p": 0.1, "repeat_penalty": 1.3}
    got = client.completions.create(model="x", prompt=prompt, seed=3, extra_body=ext, **settings)
    assert got.choices[0].text == ref.generate(prompt, seed=3, **ext, **settings).text


def test_completion_prompt_forms_n_and_echo(server, client, ref):
    prompts = ["The sky is", "Two plus two"]
    expected = [ref.generate(p, temperature=0.0, max_tokens=5) for p in prompts]
    r = client.completions.create(model="x", prompt=prompts, n=2, max_tokens=5, temperature=0)
    assert [c.index for c in r.choices] == [0, 1, 2, 3]
    assert [c.text for c in r.choices] == [expected[0].text] * 2 + [expected[1].text] * 2
    assert r.usage.prompt_tokens == sum(len(ref.tokenize(p)) for p in prompts)
    assert r.usage.completion_tokens == 2 * sum(len(e.token_ids) for e in expected)
    ids = ref.tokenize(prompts[0])
    by_ids = client.completions.create(model="x", prompt=ids, max_tokens=5, temperature=0)
    assert by_ids.choices[0].text == expected[0].text
    echoed = client.completions.create(model="x", prompt=prompts[0], max_tokens=5, temperature=0, echo=True)
    assert echoed.choices[0].text == prompts[0] + expected[0].text
    # OpenAI's default max_tokens for completions is 16; the context caps any larger request
    _, _, body = call(server, "POST", "/v1/completions", {"prompt": "The sky is", "temperature": 0,
                                                               "logit_bias": no_eog(ref)})
    jsonschema.validate(json.loads(body), COMPLETION)
    assert json.loads(body)["usage"]["completion_tokens"] == 16
    capped = client.completions.create(model="x", prompt=ids, max_tokens=100_000, temperature=0,
                                       extra_body={"ignore_eos": True})
    assert capped.choices[0].finish_reason == "length"
    assert capped.usage.completion_tokens == N_CTX - len(ids)


def test_stop_strings_cut_and_never_stream(server, client, ref):
    prompt = "Stop here:"
    full = ref.generate(prompt, temperature=0.0, max_tokens=16, logit_bias={t: float("-inf")
                                                                            for t in ref.tokenizer.eog_ids})
    stop = next(full.text[i:i + 2] for i in range(1, len(full.text) - 1) if full.text.index(full.text[i:i + 2]) > 0)
    cut = full.text[:full.text.index(stop)]
    r = client.completions.create(model="x", prompt=prompt, max_tokens=16, temperature=0, stop=[stop, "\x00"],
                                  logit_bias=no_eog(ref))
    assert (r.choices[0].text, r.choices[0].finish_reason) == (cut, "stop")
    chunks = [c.choices[0].text for c in client.completions.create(
        model="x", prompt=prompt, max_tokens=16, temperature=0, stop=stop, logit_bias=no_eog(ref), stream=True)]
    assert "".join(chunks) == cut and not any(stop in c for c in chunks)


def test_n2_chat_and_32_concurrent_clients_get_what_they_get_alone(server, client, ref):
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=6)
    r = client.chat.completions.create(model="x", messages=MESSAGES, n=2, max_tokens=6, temperature=0)
    assert [c.message.content for c in r.choices] == [expected.text] * 2
    assert r.usage.completion_tokens == 2 * len(expected.token_ids)

    prompts = [f"Client number {i} says" for i in range(32)]
    alone = [ref.generate(p, temperature=0.0, max_tokens=4).text for p in prompts]
    got: list = [None] * len(prompts)
    barrier = threading.Barrier(len(prompts))

    def one(i: int) -> None:
        try:
            barrier.wait()
            if i % 2:
                stream = client.completions.create(model="x", prompt=prompts[i], max_tokens=4, temperature=0,
                                                   stream=True)
                got[i] = "".join(c.choices[0].text for c in stream)
            else:
                got[i] = client.completions.create(model="x", prompt=prompts[i], max_tokens=4,
                                                   temperature=0).choices[0].text
        except BaseException as e:
            got[i] = e

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(prompts))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(300)
    assert got == alone


WEATHER = [{"type": "function", "function": {
    "name": "get_weather", "description": "The weather in a city",
    "parameters": {"type": "object", "properties": {"city": {"enum": ["Oslo", "Paris"]}}, "required": ["city"],
                   "additionalProperties": False}}}]
ASK = [{"role": "user", "content": "What is the weather in Oslo?"}]


def test_response_format_json_object_and_schema(server, client, ref):
    schema = {"type": "object", "properties": {"colour": {"enum": ["red", "green", "blue"]},
                                               "count": {"type": "integer"}},
              "required": ["colour", "count"], "additionalProperties": False}
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=40, json_schema=schema)
    r = client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=40, temperature=0,
                                       response_format={"type": "json_schema",
                                                        "json_schema": {"name": "answer", "schema": schema}})
    assert r.choices[0].message.content == expected.text
    if r.choices[0].finish_reason == "stop":          # a finished reply is a document of the schema
        jsonschema.validate(json.loads(r.choices[0].message.content), schema)
    obj = client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=24, temperature=0,
                                         response_format={"type": "json_object"})
    assert obj.choices[0].message.content == ref.chat(MESSAGES, temperature=0.0, max_tokens=24, json=True).text
    assert obj.choices[0].message.content.startswith("{")


def test_logprobs_chat_completions_and_streams_equal_llm(server, client, ref):
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=5, logprobs=True, top_logprobs=3)
    r = client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=5, temperature=0, logprobs=True,
                                       top_logprobs=3)
    got = r.choices[0].logprobs.content
    assert [t.token for t in got] == [t.token for t in expected.logprobs]
    assert [t.logprob for t in got] == pytest.approx([t.logprob for t in expected.logprobs], abs=1e-6)
    assert [bytes(t.bytes) for t in got] == [t.bytes for t in expected.logprobs]
    assert all(len(t.top_logprobs) == 3 and t.top_logprobs[0].logprob >= t.top_logprobs[2].logprob for t in got)
    stream = client.chat.completions.create(model="x", messages=MESSAGES, max_tokens=5, temperature=0,
                                            logprobs=True, top_logprobs=3, stream=True)
    streamed = [t for c in stream if c.choices and c.choices[0].logprobs for t in c.choices[0].logprobs.content]
    assert [(t.token, round(t.logprob, 6)) for t in streamed] == [(t.token, round(t.logprob, 6)) for t in got]
    # the legacy completions format: parallel lists, alternatives as {token: logprob}, offsets into the text
    c = client.completions.create(model="x", prompt="The sky is", max_tokens=4, temperature=0, logprobs=2)
    lp = c.choices[0].logprobs
    assert "".join(lp.tokens) == c.choices[0].text or c.choices[0].finish_reason == "stop"
    assert lp.text_offset == [sum(len(t) for t in lp.tokens[:i]) for i in range(len(lp.tokens))]
    assert all(len(alt) <= 2 and tok in alt for tok, alt in zip(lp.tokens, lp.top_logprobs))
    assert client.completions.create(model="x", prompt="x", max_tokens=2, temperature=0).choices[0].logprobs is None


def test_tool_calls_equal_llm_chat_streamed_or_not(server, client, ref):
    expected = ref.chat(ASK, tools=WEATHER, tool_choice="required", temperature=0.0, max_tokens=80)
    assert expected.finish_reason == "tool_calls" and expected.tool_calls
    r = client.chat.completions.create(model="x", messages=ASK, tools=WEATHER, tool_choice="required",
                                       temperature=0, max_tokens=80)
    choice = r.choices[0]
    assert choice.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls] == \
        [(c.name, json.loads(c.arguments)) for c in expected.tool_calls]
    assert all(c.type == "function" and c.id for c in choice.message.tool_calls)
    assert (choice.message.content or "") == expected.text
    stream = client.chat.completions.create(model="x", messages=ASK, tools=WEATHER, tool_choice="required",
                                            temperature=0, max_tokens=80, stream=True)
    # OpenAI's streaming shape: a call's first delta has its id, type and name, later ones append argument
    # fragments as the model writes them; accumulated as the openai client's docs do
    calls, finish, fragments = {}, None, 0
    for c in stream:
        if not c.choices:
            continue
        finish = c.choices[0].finish_reason or finish
        for d in c.choices[0].delta.tool_calls or []:
            if d.index not in calls:
                assert d.id and d.type == "function" and d.function.name
                calls[d.index] = {"id": d.id, "name": d.function.name, "arguments": ""}
            else:
                assert d.id is None and d.function.name is None
            calls[d.index]["arguments"] += d.function.arguments or ""
            fragments += bool(d.function.arguments)
    assert finish == "tool_calls"
    assert [(c["name"], json.loads(c["arguments"])) for c in calls.values()] == \
        [(c.function.name, json.loads(c.function.arguments)) for c in choice.message.tool_calls]
    assert fragments > len(calls)           # the arguments arrived in pieces, not in one chunk at the end
    with client.chat.completions.stream(model="x", messages=ASK, tools=WEATHER, tool_choice="required",
                                        temperature=0, max_tokens=80) as s:   # the client's own accumulation
        final = s.get_final_completion().choices[0]
    assert final.finish_reason == "tool_calls"
    assert [(c.function.name, json.loads(c.function.arguments)) for c in final.message.tool_calls] == \
        [(c["name"], json.loads(c["arguments"])) for c in calls.values()]
    # the answer goes back as a tool message; with tool_choice "none" the reply is text
    history = [*ASK, {"role": "assistant", "content": None, "tool_calls": [c.model_dump() for c in
                                                                             choice.message.tool_calls]},
               {"role": "tool", "tool_call_id": choice.message.tool_calls[0].id, "content": "Sunny, 21 C"}]
    final = client.chat.completions.create(model="x", messages=history, tools=WEATHER, tool_choice="none",
                                           temperature=0, max_tokens=6)
    assert final.choices[0].message.content == ref.chat(history, tools=WEATHER, tool_choice="none",
                                                        temperature=0.0, max_tokens=6).text


# -- bad input: OpenAI's error object naming the parameter -----------------------------------------------
CHAT = "/v1/chat/completions"
COMP = "/v1/completions"
BAD = [
    (CHAT, {"messages": MESSAGES, "temperature": -0.5}, "temperature"),
    (CHAT, {"messages": MESSAGES, "temperature": "hot"}, "temperature"),
    (CHAT, {"messages": MESSAGES, "top_p": 0}, "top_p"),
    (CHAT, {"messages": MESSAGES, "n": 0}, "n"),
    (CHAT, {"messages": MESSAGES, "n": 17}, "n"),
    (CHAT, {"messages": MESSAGES, "max_tokens": 0}, "max_tokens"),
    (CHAT, {"messages": MESSAGES, "max_tokens": "4"}, "max_tokens"),
    (CHAT, {"messages": MESSAGES, "presence_penalty": 2.5}, "presence_penalty"),
    (CHAT, {"messages": MESSAGES, "frequency_penalty": -3}, "frequency_penalty"),
    (CHAT, {"messages": MESSAGES, "stop": [""]}, "stop"),
    (CHAT, {"messages": MESSAGES, "stop": 5}, "stop"),
    (CHAT, {"messages": MESSAGES, "seed": "s"}, "seed"),
    (CHAT, {"messages": MESSAGES, "stream": "yes"}, "stream"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"abc": 1}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"5": 500}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "logit_bias": {"999999999": 1}}, "logit_bias"),
    (CHAT, {"messages": MESSAGES, "top_k": -2}, "top_k"),
    (CHAT, {"messages": MESSAGES, "stream_options": {"include_usage": "y"}}, "stream_options.include_usage"),
    (CHAT, {"messages": []}, "messages"),
    (CHAT, {}, "messages"),
    (CHAT, {"messages": [{"role": "wizard", "content": "hi"}]}, "messages[0].role"),
    (CHAT, {"messages": [{"role": "user", "content": 5}]}, "messages[0].content"),
    (CHAT, {"messages": [{"role": "user", "content": [{"type": "image_url"}]}]}, "messages[0].content[0]"),
    (CHAT, {"messages": MESSAGES, "top_logprobs": 3}, "top_logprobs"),              # needs logprobs
    (CHAT, {"messages": MESSAGES, "logprobs": True, "top_logprobs": 21}, "top_logprobs"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "xml"}}, "response_format"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema"}}, "response_format"),
    (CHAT, {"messages": MESSAGES, "response_format": {"type": "json_schema",
                                                      "json_schema": {"name": "x", "schema": {"type": "bogus"}}}},
     "response_format"),
    (CHAT, {"messages": MESSAGES, "grammar": "root ::= ("}, "grammar"),
    (CHAT, {"messages": MESSAGES, "tool_choice": "required"}, "tool_choice"),      # no tools
    (CHAT, {"messages": MESSAGES, "tools": [{"type": "function", "function": {"name": "f"}}],
            "tool_choice": {"type": "function", "function": {"name": "g"}}}, "tool_choice"),
    (CHAT, {"messages": MESSAGES, "mirostat": 7}, "mirostat"),
    (CHAT, {"messages": MESSAGES, "typical_p": 1.5}, "typical_p"),
    (COMP, {"prompt": "hi", "logprobs": 6}, "logprobs"),
    (COMP, {"prompt": ""}, "prompt"),
    (COMP, {"prompt": []}, "prompt"),
    (COMP, {"prompt": [-1, 5]}, "prompt"),
    (COMP, {"prompt": [1, "a"]}, "prompt"),
    (COMP, {"prompt": "x" * 3000, "max_tokens": 1}, "prompt"),          # more tokens than the context
    (COMP, {"prompt": "hi", "suffix": "bye"}, "suffix"),
    (COMP, {"prompt": "hi", "best_of": 3}, "best_of"),
]


@pytest.mark.parametrize("path, body, param", BAD, ids=[f"{p[-11:]}-{k}" for p, _, k in BAD])
def test_bad_parameters_are_400_naming_the_parameter(server, path, body, param):
    err = error_of(*call(server, "POST", path, body)[::2])
    assert err["param"] == param, err
    assert err["type"] == "invalid_request_error"


@pytest.mark.parametrize("raw", [b"{", b"\xff\xfe{}", b"[1, 2]", b"", b'{"messages": "\xc3\x28"}', b"null",
                                 b'{"prompt": "\\ud800"}'])
def test_malformed_bodies_are_400_and_the_server_goes_on(server, client, raw):
    for path in (CHAT, COMP):
        err = error_of(*call(server, "POST", path, raw=raw)[::2])
        assert err["message"]
    assert client.completions.create(model="x", prompt="still", max_tokens=2, temperature=0).choices


def test_unknown_fields_are_ignored(server, ref):
    body = {"messages": MESSAGES, "max_tokens": 3, "temperature": 0, "frobnicate": {"x": 1}, "user": "u1"}
    status, _, raw = call(server, "POST", CHAT, body)
    assert status == 200
    assert json.loads(raw)["choices"][0]["message"]["content"] == ref.chat(MESSAGES, temperature=0.0,
                                                                           max_tokens=3).text


# -- limits: auth, body size, queue, timeout, disconnects ------------------------------------------------
def test_api_key_is_required_except_on_health(strict):
    body = {"messages": MESSAGES, "max_tokens": 2}
    assert error_of(*call(strict, "POST", CHAT, body)[::2], 401)["code"] == "invalid_api_key"
    assert error_of(*call(strict, "POST", CHAT, body, key="wrong")[::2], 401)["code"] == "invalid_api_key"
    assert error_of(*call(strict, "GET", "/metrics")[::2], 401)
    assert error_of(*call(strict, "GET", "/nowhere")[::2], 401)          # no probing without the key
    assert call(strict, "GET", "/health")[0] == 200
    assert call(strict, "POST", CHAT, body, key=KEY)[0] == 200
    with pytest.raises(openai.AuthenticationError):
        openai.OpenAI(base_url=strict.base_url, api_key="wrong", max_retries=0).models.list()
    assert openai.OpenAI(base_url=strict.base_url, api_key=KEY, max_retries=0).models.list().data


def test_bodies_over_the_limit_are_413_while_reading(strict):
    big = json.dumps({"prompt": "x" * (64 * 1024), "max_tokens": 1}).encode()
    assert error_of(*call(strict, "POST", COMP, raw=big, key=KEY)[::2], 413)["code"] == "request_too_large"
    # no Content-Length (chunked): counted as it arrives, refused once past the limit
    conn = http.client.HTTPConnection(*_addr(strict), timeout=60)
    conn.request("POST", COMP, body=iter([big[i:i + 8192] for i in range(0, len(big), 8192)]),
                 headers={"Authorization": f"Bearer {KEY}", "Content-Type": "application/json"},
                 encode_chunked=True)
    resp = conn.getresponse()
    assert error_of(resp.status, resp.read(), 413)
    conn.close()
    assert call(strict, "POST", COMP, {"prompt": "fine", "max_tokens": 1}, key=KEY)[0] == 200
    # under the limit but longer than the context (tokenized off the event loop): 400, named
    err = error_of(*call(strict, "POST", COMP, {"prompt": "lorem ipsum " * 4000}, key=KEY)[::2])
    assert (err["param"], err["code"]) == ("prompt", "context_length_exceeded")


def test_a_flood_gets_429_with_retry_after_and_the_rest_is_answered(strict, ref):
    body = {"prompt": "flood", "max_tokens": 12, "temperature": 0}      # long enough to hold a slot
    expected = ref.generate("flood", temperature=0.0, max_tokens=12).text
    results: list = [None] * 12
    barrier = threading.Barrier(len(results))

    def one(i: int) -> None:
        barrier.wait()
        results[i] = call(strict, "POST", COMP, body, key=KEY)

    threads = [threading.Thread(target=one, args=(i,)) for i in range(len(results))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    statuses = sorted(r[0] for r in results)
    assert set(statuses) <= {200, 429} and 429 in statuses and 200 in statuses, statuses
    for status, headers, raw in results:
        if status == 429:
            assert headers["retry-after"] == "1"
            assert error_of(status, raw, 429)["code"] == "rate_limit_exceeded"
        else:
            assert json.loads(raw)["choices"][0]["text"] == expected
    wait_idle(strict, KEY)


def test_a_request_past_the_timeout_is_504_and_freed(strict, ref):
    t0 = time.monotonic()
    status, _, raw = call(strict, "POST", COMP, {"prompt": "go on", "max_tokens": 4000, "temperature": 0,
                                                 "logit_bias": no_eog(ref)}, key=KEY)
    assert error_of(status, raw, 504)["code"] == "timeout"
    assert time.monotonic() - t0 < 30
    # streamed, the headers are out: the stream ends with an error event, then [DONE]
    events = sse(strict, COMP, {"prompt": "go on", "max_tokens": 4000, "temperature": 0,
                                "logit_bias": no_eog(ref)}, key=KEY)
    assert events[-1] == "[DONE]" and "error" in events[-2]
    jsonschema.validate(events[-2], ERROR)
    assert events[-2]["error"]["code"] == "timeout"
    assert all(e["choices"][0]["text"] is not None for e in events[:-2])
    m = wait_idle(strict, KEY)
    assert m["oxigpu_kv_blocks_used"] == 0


def _abandon(server, body: dict, read_first: bool) -> None:
    """Send `body` on a raw socket, optionally read the answer's first token (the second event: the first
    is the role), then hang up."""
    sock = socket.create_connection(_addr(server))
    data = json.dumps(body).encode()
    sock.sendall(f"POST {CHAT} HTTP/1.1\r\nHost: x\r\nContent-Type: application/json\r\n"
                 f"Content-Length: {len(data)}\r\n\r\n".encode() + data)
    if read_first:
        seen = b""
        while seen.count(b"data: ") < 2:
            chunk = sock.recv(65536)
            assert chunk, seen
            seen += chunk
    else:
        time.sleep(0.2)          # inside the generation, not before it
    sock.close()


@pytest.mark.parametrize("streaming", [True, False], ids=["stream", "blocking"])
def test_a_client_that_disconnects_has_its_generation_cancelled_and_freed(server, ref, streaming):
    wait_idle(server)
    before = metrics(server)["oxigpu_generated_tokens_total"]
    max_tokens = N_CTX - 64
    _abandon(server, {"messages": MESSAGES, "max_tokens": max_tokens, "temperature": 0, "stream": streaming,
                      "logit_bias": no_eog(ref)}, read_first=streaming)
    after = wait_idle(server)
    generated = after["oxigpu_generated_tokens_total"] - before
    assert 1 <= generated < max_tokens / 2, generated
    assert after["oxigpu_kv_blocks_used"] == 0


def test_metrics_count_requests_tokens_and_latency(server, client):
    before = metrics(server)
    r = client.completions.create(model="x", prompt="count me", max_tokens=4, temperature=0)
    after = metrics(server)
    assert after["oxigpu_prompt_tokens_total"] - before["oxigpu_prompt_tokens_total"] == r.usage.prompt_tokens
    assert after["oxigpu_generated_tokens_total"] - before["oxigpu_generated_tokens_total"] \
        == r.usage.completion_tokens
    key = "oxigpu_requests_total{route=/v1/completions,status=200}"
    assert after[key] - before.get(key, 0) == 1
    assert after["oxigpu_time_to_first_token_seconds_count"] - before["oxigpu_time_to_first_token_seconds_count"] == 1
    assert after["oxigpu_inter_token_latency_seconds_count"] - before["oxigpu_inter_token_latency_seconds_count"] \
        == r.usage.completion_tokens - 1
    assert after["oxigpu_kv_blocks_total"] >= N_CTX // 32     # the pool holds at least one full context


def test_health_while_loading_and_after_a_failed_load(tiny_path):
    go = threading.Event()

    def slow_loader() -> AsyncLLM:
        go.wait(60)
        return AsyncLLM(tiny_path, backend="numpy", n_ctx=64)

    server = BackgroundServer(slow_loader).start(wait_loaded=False)
    try:
        status, _, body = call(server, "GET", "/health")
        assert (status, json.loads(body)) == (503, {"status": "loading"})
        err = error_of(*call(server, "POST", CHAT, {"messages": MESSAGES})[::2], 503)
        assert err["code"] == "model_loading"
        go.set()
        server.state.wait_loaded(60)
        assert json.loads(call(server, "GET", "/health")[2]) == {"status": "ok"}
    finally:
        server.stop()
    broken = BackgroundServer(lambda: AsyncLLM("/nonexistent/model.gguf")).start(wait_loaded=False)
    try:
        broken.state.wait_loaded(60)
        status, _, body = call(broken, "GET", "/health")
        assert status == 500 and json.loads(body)["status"] == "error"
        assert "not found" in json.loads(body)["error"]
    finally:
        broken.stop()
    with pytest.raises(OxigpuError, match="failed to load"):
        BackgroundServer(lambda: AsyncLLM("/nonexistent/model.gguf")).start()


def test_cli_serve_loads_listens_and_answers(tiny_path):
    env = {**os.environ, "OXIGPU_API_KEY": KEY}
    proc = subprocess.Popen([sys.executable, "-m", "oxigpu", "serve", "-m", tiny_path, "--port", "0",
                             "--backend", "numpy", "--n-ctx", "128"], stdout=subprocess.PIPE,
                            stderr=subprocess.PIPE, text=True, env=env)
    try:
        line = proc.stdout.readline()
        m = re.search(r"listening on (http://127\.0\.0\.1:\d+)", line)
        assert m, (line, proc.stderr.read() if proc.poll() is not None else "")
        url = m.group(1)
        c = openai.OpenAI(base_url=url + "/v1", api_key=KEY, max_retries=0)
        assert c.completions.create(model="x", prompt="hi", max_tokens=2, temperature=0).choices
        with pytest.raises(openai.AuthenticationError):
            openai.OpenAI(base_url=url + "/v1", api_key="nope", max_retries=0).models.list()
        # a second server on the same port fails at once, in one line
        port = url.rsplit(":", 1)[1]
        taken = subprocess.run([sys.executable, "-m", "oxigpu", "serve", "-m", tiny_path, "--port", port],
                               check=False, capture_output=True, text=True, timeout=120)
        assert taken.returncode == 1 and "cannot listen" in taken.stderr
        assert len(taken.stderr.strip().splitlines()) == 1
    finally:
        proc.send_signal(signal.SIGINT)
        try:
            proc.wait(30)
        finally:
            if proc.poll() is None:
                proc.kill()
    assert "loading tiny-qwen2.gguf" in proc.stderr.read()


@pytest.mark.gpu
def test_wgpu_backend_serves_what_llm_generates(tiny_path):
    try:
        ref = LLM(tiny_path, backend="wgpu", n_ctx=128)
    except DeviceError as e:
        pytest.skip(str(e))
    expected = ref.chat(MESSAGES, temperature=0.0, max_tokens=6).text
    seeded = ref.generate("Once", temperature=1.2, top_k=0, top_p=1.0, min_p=0.0, seed=9, max_tokens=6).text
    del ref
    with BackgroundServer(lambda: AsyncLLM(tiny_path, backend="wgpu", n_ctx=128)) as server:
        c = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0)
        r = c.chat.completions.create(model="x", messages=MESSAGES, max_tokens=6, temperature=0)
        assert r.choices[0].message.content == expected
        s = c.completions.create(model="x", prompt="Once", temperature=1.2, seed=9, max_tokens=6, stream=True)
        assert "".join(ch.choices[0].text for ch in s) == seeded


# -- real models ------------------------------------------------------------------------------------------
@pytest.fixture(scope="module", params=["gemma3", "qwen"])
def real(request):
    """(reference LLM, server) on a real model, numpy backend."""
    path: Path = request.getfixturevalue(f"{request.param}_path")
    ref = LLM(path, backend="numpy", n_ctx=N_CTX)
    with BackgroundServer(lambda: AsyncLLM(path, backend="numpy", n_ctx=N_CTX, max_seqs=4)) as server:
        yield ref, server


@pytest.mark.realmodel
@pytest.mark.slow
def test_real_models_chat_stream_and_seeded_completion(real):
    ref, server = real
    c = openai.OpenAI(base_url=server.base_url, api_key="x", max_retries=0, timeout=300)
    messages = [{"role": "user", "content": "What is the capital of France? Answer in one word."}]
    expected = ref.chat(messages, temperature=0.0, max_tokens=6)
    r = c.chat.completions.create(model="x", messages=messages, max_tokens=6, temperature=0)
    assert r.choices[0].message.content == expected.text
    assert (r.usage.prompt_tokens, r.usage.completion_tokens) == (len(ref.chat_prompt(messages)),
                                                                  len(expected.token_ids))
    # two streams at once interleave on the one engine and each gets its own text
    seeded = ref.generate("The ocean is", temperature=0.8, top_k=0, top_p=0.95, min_p=0.0, seed=4, max_tokens=6)
    out: dict = {}

    def chat_stream() -> None:
        s = c.chat.completions.create(model="x", messages=messages, max_tokens=6, temperature=0, stream=True)
        out["chat"] = "".join(ch.choices[0].delta.content or "" for ch in s if ch.choices)

    t = threading.Thread(target=chat_stream)
    t.start()
    s = c.completions.create(model="x", prompt="The ocean is", temperature=0.8, top_p=0.95, seed=4, max_tokens=6,
                             stream=True)
    out["completion"] = "".join(ch.choices[0].text for ch in s)
    t.join(300)
    assert out == {"chat": expected.text, "completion": seeded.text}


def test_cli_serve_refuses_bad_options_before_loading(tiny_path):
    from click.testing import CliRunner

    from oxigpu.cli.main import cli
    for args, fragment in ((["--kv-memory", "lots"], "not a size"), (["--max-body", "0"], "at least one byte"),
                           (["--max-seqs", "0"], "0"), (["--port", "70000"], "70000")):
        r = CliRunner().invoke(cli, ["serve", "-m", tiny_path, *args])
        assert r.exit_code == 2 and fragment in r.output, r.output
    r = CliRunner().invoke(cli, ["serve", "-m", "/nonexistent.gguf"])
    assert r.exit_code == 1 and "not found" in r.output


@pytest.mark.parametrize("fmt,text,content,calls", [
    ("hermes", 'Sure, <tool_call>\n{"name": "get_weather", "arguments": {"city": "Paris \\"x\\"", "days": [1, 2]}}\n'
               '</tool_call> and <tool_call>{"name": "f", "arguments": 5}</tool_call> done',
     "Sure,  and  done", [("get_weather", '{"city": "Paris \\"x\\"", "days": [1, 2]}'), ("f", "5")]),
    ("hermes", "no call, a <tool", "no call, a <tool", []),
    ("hermes", '{"name": "f", "arguments": {"a": 1}}', "", [("f", '{"a": 1}')]),     # a bare call: whole, at the end
    ("generic", '{"tool_calls": [{"name": "f", "arguments": {"a": {"b": [1]}}}, {"name": "g", "arguments": {}}]}',
     "", [("f", '{"a": {"b": [1]}}'), ("g", "{}")]),
    ("generic", '{"response": "hello"}', "hello", []),
])
def test_tool_call_stream_pieces_add_up_to_the_parsed_reply(fmt, text, content, calls):
    """ToolCallStream fed a reply a few characters at a time: the content and each call's name and argument
    fragments add up to what the parsed reply holds (ChatPlan.finish), and a call's arguments arrive in
    several pieces where the model wrote them in several."""
    from oxigpu.runtime.params import GenerationResult
    from oxigpu.runtime.tools import ChatPlan, ToolCallStream

    ts, got, pieces = ToolCallStream(fmt), "", {}
    parsed = ChatPlan(fmt, [], None, {}, ("f", "g", "get_weather")).finish(GenerationResult(text, [], "stop", None))
    out = [ts.feed(text[i:i + 3]) for i in range(0, len(text), 3)] + [ts.finish(parsed)]
    for c, ds in out:
        got += c
        for d in ds:
            if d.id is not None:
                assert d.index not in pieces and d.name
                pieces[d.index] = [d.name, d.arguments, 0]
            else:
                pieces[d.index][1] += d.arguments
                pieces[d.index][2] += 1
    assert got == content == parsed.text
    assert [(n, a) for n, a, _ in pieces.values()] == calls
    assert [(c.name, json.loads(c.arguments)) for c in parsed.tool_calls] == [(n, json.loads(a)) for n, a in calls]
    if fmt == "generic" or "<tool_call>" in text:
        assert all(k > 1 for n, a, k in pieces.values() if len(a) > 3)
