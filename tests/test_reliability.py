"""Reliability on tiny synthetic models, on both backends where it matters (wgpu runs on lavapipe in CI):
hostile chat templates inside real GGUF files, memory guards, interruption (Ctrl-C inside a step, closing a
stream), threads, leaks of GPU buffers, and fuzzed text and parameters through the API and the CLI.

Device-layer failures (shader compile errors, validation errors, device loss) are in
test_reliability_wgpu.py.
"""
from __future__ import annotations

import gc
import random
import re
import threading
import tracemalloc
from collections.abc import Iterator
from contextlib import contextmanager
from dataclasses import replace
from typing import Any

import pytest
from click.testing import CliRunner
from test_tokenizer import _random_texts

from oxigpu import LLM
from oxigpu.cli.main import cli
from oxigpu.errors import DeviceError, InvalidParameterError, OutOfMemoryError, OxigpuError, TemplateError
from oxigpu.runtime.params import SamplingParams

SAMPLED = {"temperature": 1.2, "top_k": 0, "top_p": 1.0, "min_p": 0.0, "max_tokens": 20}
BACKENDS = ["numpy", pytest.param("wgpu", marks=pytest.mark.gpu)]


def gpu_device():
    """The wgpu device (lavapipe in CI), or skip."""
    from oxigpu.backends.wgpu.device import Device
    try:
        return Device.get()
    except DeviceError as e:
        pytest.skip(str(e))


def live_buffers(backend: str) -> int:
    """Live wgpu buffers of the process-wide device (0 on numpy), after collecting garbage."""
    gc.collect()
    return gpu_device().live_buffers() if backend == "wgpu" else 0


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


@pytest.fixture(scope="module")
def path(tiny_models) -> str:
    return tiny_models["tiny-qwen2"]


@pytest.fixture(scope="module")
def llms(path) -> dict[str, LLM]:
    """One LLM per backend, created lazily (wgpu only when a test asks for it)."""
    return {}


def get_llm(llms: dict[str, LLM], path: str, backend: str) -> LLM:
    if backend == "wgpu":
        gpu_device()
    if backend not in llms:
        llms[backend] = LLM(path, backend=backend, n_ctx=128)
    return llms[backend]


# -- 1. chat templates are untrusted code, even inside a model file ---------------------------------------
@contextmanager
def template_in_synth(monkeypatch, template: str) -> Iterator[None]:
    """Make `oxigpu.synth` write `template` as tokenizer.chat_template (through GGUFWriter, as any file)."""
    from oxigpu.synth import writer
    real = writer.build_vocab

    def build(style: str, n_vocab: int, chat_template: bool):
        vocab = real(style, n_vocab, chat_template)
        vocab.chat_template = template
        return vocab
    with monkeypatch.context() as m:
        m.setattr(writer, "build_vocab", build)
        yield


HOSTILE_IN_FILE = {
    "class walk": ("{{ ''.__class__.__mro__[1].__subclasses__() }}", "unsafe"),
    "os via cycler": ("{{ cycler.__init__.__globals__.os.popen('id').read() }}", "unsafe"),
    "include a file": ("{% include '/etc/passwd' %}", "not allowed"),
    "huge range": ("{% for i in range(10**9) %}{% endfor %}", "range"),
    "output flood": ("{% for i in range(1000000) %}{{ 'x' * 1000 }}{% endfor %}", "output"),
    "syntax error": ("{% for m in messages %}", "syntax error"),
}


@pytest.mark.parametrize("name", sorted(HOSTILE_IN_FILE))
def test_hostile_template_in_a_gguf_file_is_refused_by_llm_and_cli(name, tmp_path, monkeypatch):
    from oxigpu.synth import synthesize
    template, fragment = HOSTILE_IN_FILE[name]
    file = tmp_path / "hostile.gguf"
    with template_in_synth(monkeypatch, template):
        synthesize("tiny-qwen3", file, seed=3)
    llm = LLM(file, backend="numpy", n_ctx=64)          # loading never renders the template
    assert llm.tokenizer.chat_template == template
    with pytest.raises(TemplateError, match=fragment):
        llm.chat([{"role": "user", "content": "hi"}], max_tokens=2)
    assert llm.generate("plain text still works", max_tokens=3, seed=1).token_ids   # the model is fine
    # the REPL reports each failed turn on one line and goes on; no traceback, exit 0 at EOF
    res = invoke("chat", "-m", str(file), "-n", "2", "--n-ctx", "64", "--backend", "numpy", input="hi\nagain\n")
    assert res.exit_code == 0, res.output
    errors = [line for line in res.stderr.splitlines() if line.startswith("error: ")]
    assert len(errors) == 2 and "template" in errors[0] and fragment in errors[0]
    assert "Traceback" not in res.output and res.stdout.strip() == ""


# -- 2. memory guards --------------------------------------------------------------------------------------
@pytest.fixture(scope="module")
def long_ctx_model(tmp_path_factory) -> str:
    """tiny-qwen2 claiming a 2**24-token training context (the most HParams accepts), so a huge n_ctx passes
    the n_ctx_train check."""
    from oxigpu.synth import get_shape, synthesize
    shape = replace(get_shape("tiny-qwen2"), name="tiny-qwen2-long", n_ctx_train=2**24)
    return str(synthesize(shape, tmp_path_factory.mktemp("long") / "long.gguf", seed=5).path)


@pytest.mark.parametrize("backend", BACKENDS)
def test_huge_n_ctx_on_a_tiny_model_is_refused_before_allocating(long_ctx_model, backend):
    before = live_buffers(backend)
    tracemalloc.start()
    try:
        with pytest.raises(OutOfMemoryError) as info:
            LLM(long_ctx_model, backend=backend, n_ctx=2**24)    # 24 GiB of KV cache
        _, peak = tracemalloc.get_traced_memory()
    finally:
        tracemalloc.stop()
    msg = str(info.value)
    assert "GiB" in msg and "n_ctx" in msg and "16777216" in msg   # numbers and the knob to turn
    assert peak < 64 * 2**20                                           # refused before allocating anything big
    del info
    assert live_buffers(backend) == before


def test_numpy_guard_against_available_memory(path, monkeypatch):
    from oxigpu.backends import base
    monkeypatch.setattr(base, "mem_available", lambda: 2**20)    # pretend 1 MiB is free
    gc.collect()
    tracemalloc.start()
    try:
        base = tracemalloc.get_traced_memory()[0]
        with pytest.raises(OutOfMemoryError) as info:
            LLM(path, backend="numpy", n_ctx=128)
        _, peak = tracemalloc.get_traced_memory()
        msg = str(info.value)
        del info
        gc.collect()
        left = tracemalloc.get_traced_memory()[0] - base
    finally:
        tracemalloc.stop()
    # numbers per part, the limit, and what to do; the weights (9.4 MiB as float32) were never dequantized
    assert re.search(r"needs \d+\.\d MiB of host memory \(weights 9\.4 MiB, KV cache \d+\.\d KiB, activations", msg)
    assert "only 1.0 MiB is available" in msg and "smaller n_ctx (now 128)" in msg
    assert peak < 4 * 2**20 and left < 2**20
    monkeypatch.undo()
    assert LLM(path, backend="numpy", n_ctx=128).generate("Hi", max_tokens=2, seed=1).token_ids


@pytest.mark.gpu
@pytest.mark.parametrize("limit", ["host memory", "binding size"])
def test_wgpu_guard_against_adapter_limits(path, monkeypatch, limit):
    from oxigpu.backends import base
    dev = gpu_device()
    if limit == "host memory":
        if not dev.is_software:
            pytest.skip("the host-memory guard applies to software adapters (lavapipe allocates host RAM)")
        monkeypatch.setattr(base, "mem_available", lambda: 2**20)
        fragments = ["wgpu backend needs", "KV cache ", "only 1.0 MiB is available"]   # the pool follows memory
    else:
        monkeypatch.setattr(dev, "max_storage_binding", 16 * 2**10)      # K or V per layer is 32 KiB here
        fragments = ["needs a buffer of", "allows 16.0 KiB per storage binding"]
    before = live_buffers("wgpu")
    with pytest.raises(OutOfMemoryError) as info:
        LLM(path, backend="wgpu", n_ctx=128)
    msg = str(info.value)
    del info
    for f in fragments:
        assert f in msg, msg
    assert "smaller n_ctx (now 128; the KV cache takes 1536 B per token) or backend='numpy'" in msg
    assert live_buffers("wgpu") == before                   # nothing was left allocated
    monkeypatch.undo()
    assert LLM(path, backend="wgpu", n_ctx=128).generate("Hi", max_tokens=2, seed=1).token_ids


# -- 4. interruption ---------------------------------------------------------------------------------------
class Steps:
    """Counts the steps a backend runs (host steps and GPU-resident batches); raises KeyboardInterrupt
    inside step number `interrupt_at` (1-based), once."""

    def __init__(self, interrupt_at: int | None = None):
        self.count, self.interrupt_at = 0, interrupt_at
        self.submitted = 0      # wgpu: GPU-resident batches queued (never interrupted)

    def tick(self) -> None:
        self.count += 1
        if self.count == self.interrupt_at:
            raise KeyboardInterrupt


@contextmanager
def counting_steps(llm: LLM, steps: Steps) -> Iterator[Steps]:
    """Hook every step of `llm`'s backend. numpy: a node in the middle of each plan's graph ticks (the
    interrupt lands with half the layers' KV written). wgpu: host steps tick between submit and read-back;
    GPU-resident batches tick right after their ids were read back (tests/test_wgpu_device.py covers an
    interrupt while the read-back buffer is mapped)."""
    backend = llm._engine.backend
    patched: list[tuple[Any, str, Any]] = []
    if backend.name == "numpy":
        for loaded in backend._plans.values():
            mid = len(loaded.steps) // 2
            node, fn, outs = loaded.steps[mid]

            def ticking(pos: int, n: int, fn=fn) -> None:
                steps.tick()
                fn(pos, n)
            patched.append((loaded.steps, mid, loaded.steps[mid]))
            loaded.steps[mid] = (node, ticking, outs)
    else:
        real_submit = backend._submit_step

        def submit_step(loaded, pieces=False):
            real_submit(loaded, pieces)
            steps.tick()
        backend._submit_step = submit_step
        real_resident_submit = backend._submit

        def resident_submit(command_buffer):
            index = real_resident_submit(command_buffer)
            steps.submitted += 1
            return index
        backend._submit = resident_submit
        real_read = backend.dev.read_submitted

        def read_then_tick(*args):
            out = real_read(*args)
            steps.tick()
            return out
        backend.dev.read_submitted = read_then_tick
    try:
        yield steps
    finally:
        if backend.name == "numpy":
            for lst, i, item in patched:
                lst[i] = item
        else:
            del backend._submit_step, backend._submit, backend.dev.read_submitted


@pytest.mark.parametrize("backend", BACKENDS)
@pytest.mark.parametrize("interrupt_at", [1, 2, 4])
def test_ctrl_c_inside_a_step_leaves_the_llm_usable_and_leaks_nothing(llms, path, backend, interrupt_at):
    llm = get_llm(llms, path, backend)
    fresh = LLM(path, backend=backend, n_ctx=128).generate("Once upon a time", seed=9, **SAMPLED)
    llm.generate("warm up the resident decode", seed=1, **SAMPLED)
    buffers = live_buffers(backend)
    with counting_steps(llm, Steps(interrupt_at)) as steps:
        with pytest.raises(KeyboardInterrupt):
            llm.generate("Once upon a time", seed=9, **SAMPLED)
        assert steps.count == interrupt_at                 # nothing ran after the interrupted step
        stream = llm.stream("Once upon a time", seed=9, **SAMPLED)
        steps.interrupt_at = steps.count + 2
        with pytest.raises(KeyboardInterrupt):
            list(stream)
        assert steps.count == steps.interrupt_at
    again = llm.generate("Once upon a time", seed=9, **SAMPLED)
    assert (again.token_ids, again.text) == (fresh.token_ids, fresh.text)
    assert live_buffers(backend) == buffers


@pytest.mark.parametrize("backend", BACKENDS)
def test_closing_a_stream_stops_within_one_step(llms, path, backend):
    llm = get_llm(llms, path, backend)
    fresh = LLM(path, backend=backend, n_ctx=128).generate("The quick brown", seed=4, **SAMPLED)
    llm.generate("warm up the plans", seed=1, **SAMPLED)   # its plans are built (the first test of the
    buffers = live_buffers(backend)                         # module on this worker would count them)
    with counting_steps(llm, Steps()) as steps:
        stream = llm.stream("The quick brown", seed=4, **SAMPLED)
        for _ in range(3):
            next(stream)
        at_close = steps.count, steps.submitted
        stream.close()
        assert list(stream) == [] and stream.result is None
        assert (steps.count, steps.submitted) == at_close  # no step ran or was queued after close()
    again = llm.generate("The quick brown", seed=4, **SAMPLED)
    assert again.token_ids == fresh.token_ids
    assert live_buffers(backend) == buffers


def test_cli_ctrl_c_exits_130_with_one_line(path, monkeypatch):
    def interrupted(self, prompt, params=None, **kw):
        yield "partial"
        raise KeyboardInterrupt
    monkeypatch.setattr(LLM, "stream", interrupted)
    res = invoke("run", "-m", path, "-p", "x", "--backend", "numpy", "--n-ctx", "64")
    assert res.exit_code == 130 and res.stdout == "xpartial"     # the prompt, echoed, then the partial answer
    assert res.stderr.splitlines()[-1] == "interrupted" and "Traceback" not in res.stderr


# -- 5. threads --------------------------------------------------------------------------------------------
@pytest.mark.parametrize("backend", BACKENDS)
def test_eight_threads_share_one_llm(llms, path, backend):
    llm = get_llm(llms, path, backend)
    jobs = [(f"prompt number {i}", i) for i in range(8)]
    params = {**SAMPLED, "max_tokens": 8}
    expected = [llm.generate(p, seed=s, **params).token_ids for p, s in jobs]
    llm.engine.prepare(SamplingParams(**params))     # the batch sizes' plans, built once and kept
    buffers = live_buffers(backend)
    got: list = [None] * len(jobs)
    errors: list[BaseException] = []
    barrier = threading.Barrier(len(jobs))

    def worker(i: int) -> None:
        try:
            barrier.wait()
            prompt, seed = jobs[i]
            if i % 4 == 3:               # a stream abandoned after two pieces, then a full call
                stream = llm.stream(prompt, seed=seed, **params)
                next(stream), next(stream)
                stream.close()
            if i % 2:
                stream = llm.stream(prompt, seed=seed, **params)
                list(stream)
                got[i] = stream.result.token_ids
            else:
                got[i] = llm.generate(prompt, seed=seed, **params).token_ids
        except BaseException as e:      # surfaced below, with the thread's own traceback
            errors.append(e)

    threads = [threading.Thread(target=worker, args=(i,)) for i in range(len(jobs))]
    for t in threads:
        t.start()
    for t in threads:
        t.join(120)
    assert not errors, errors
    assert got == expected
    assert live_buffers(backend) == buffers


# -- 6. fuzzing: text and parameters -----------------------------------------------------------------------
@pytest.mark.parametrize("arch", ["tiny-llama", "tiny-qwen2", "tiny-gemma3"])
def test_random_unicode_and_bytes_round_trip(tiny_models, arch):
    """SentencePiece byte fallback and byte-level BPE cover every byte: any valid text decodes back exactly
    (SPM writes spaces as U+2581, so a literal U+2581 comes back as a space, as in llama.cpp)."""
    llm = LLM(tiny_models[arch], backend="numpy", n_ctx=32)
    tok = llm.tokenizer
    rng = random.Random(arch)
    for text in _random_texts(len(arch), 150):
        ids = llm.tokenize(text, add_special=False, parse_special=False)
        expected = text.replace("\u2581", " ") if tok.model == "llama" else text
        assert llm.detokenize(ids) == expected, repr(text)
        with_specials = llm.tokenize(text)                  # special parsing and BOS never fail either
        assert isinstance(llm.detokenize(with_specials), str)
    for _ in range(100):                                    # any id sequence decodes, streamed or not
        ids = [rng.randrange(tok.vocab_size) for _ in range(rng.randint(1, 20))]
        stream = tok.stream()
        assert "".join(stream.feed(i) for i in ids) + stream.flush() == tok.decode(ids)
    with pytest.raises(InvalidParameterError, match=r"lone surrogate U\+D800 at index 1"):
        llm.tokenize("a\ud800b")
    with pytest.raises(OxigpuError, match="outside the vocabulary"):
        llm.detokenize([tok.vocab_size])


@pytest.mark.parametrize("kwargs, fragment", [
    ({"max_tokens": -1}, "max_tokens must be >= 0"),
    ({"max_tokens": 2.5}, "max_tokens must be an integer"),
    ({"temperature": -0.1}, "temperature must be >= 0"),
    ({"temperature": float("nan")}, "temperature must be a number"),
    ({"temperature": float("inf")}, "temperature must be finite"),
    ({"temperature": "hot"}, "temperature must be a number"),
    ({"top_p": 0.0}, r"top_p must be in \(0, 1\]"),
    ({"top_p": 1.0001}, r"top_p must be in \(0, 1\]"),
    ({"top_p": -0.5}, r"top_p must be in \(0, 1\]"),
    ({"top_k": -5}, "top_k must be >= 0"),
    ({"min_p": -0.1}, r"min_p must be in \[0, 1\]"),
    ({"repeat_penalty": 0.0}, "repeat_penalty must be > 0"),
    ({"repeat_last_n": -2}, "repeat_last_n must be >= -1"),
    ({"presence_penalty": float("-inf")}, "presence_penalty must be finite"),
    ({"seed": -1}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ({"seed": 2**64}, r"seed must be an integer in \[0, 2\*\*64\)"),
    ({"seed": "42"}, r"seed must be an integer"),
    ({"seed": 1.0}, r"seed must be an integer"),
    ({"seed": True}, r"seed must be an integer"),
    ({"stop": [""]}, "stop strings must be non-empty"),
    ({"stop": [7]}, "stop strings must be non-empty strings"),
    ({"logit_bias": {-1: 1.0}}, "logit_bias keys must be token ids"),
    ({"logit_bias": {"a": 1.0}}, "logit_bias keys must be token ids"),
    ({"logit_bias": {5: float("nan")}}, r"logit_bias\[5\] must be a number"),
    ({"logit_bias": {5: float("inf")}}, r"logit_bias\[5\] must be finite \(float32\) or -inf"),
    ({"logit_bias": {5: 1e39}}, r"logit_bias\[5\] must be finite"),
    ({"logit_bias": {10**6: 1.0}}, "outside the vocabulary"),
    ({"logit_bias": {i: float("-inf") for i in range(1536)}}, "bans every token"),
    ({"frobnicate": 1}, "unknown sampling parameter"),
])
def test_api_rejects_bad_sampling_parameters(llms, path, kwargs, fragment):
    llm = get_llm(llms, path, "numpy")
    with pytest.raises(InvalidParameterError, match=fragment):
        llm.generate("Hi", **kwargs)
    with pytest.raises(InvalidParameterError, match=fragment):
        llm.stream("Hi", **kwargs)      # refused when the stream is made, not at its first token


@pytest.mark.parametrize("prompt, fragment", [
    ("", "empty"), ([], "empty"), (None, "got NoneType"), (42, "got int"), (b"bytes", "not bytes"),
    ([1.5], "token ids"), ([True], "token ids"), (["a", 5], "token ids"), ([-1], "outside the vocabulary"),
    ([10**9], "outside the vocabulary"), ("\udc80", "lone surrogate"),
    ([[1, 2], [1.5]], "token ids"), (["fine", ""], "empty"),          # a list of prompts: each one checked
])
def test_api_rejects_bad_prompts(llms, path, prompt, fragment):
    with pytest.raises(InvalidParameterError, match=fragment):
        get_llm(llms, path, "numpy").generate(prompt, max_tokens=1)


@pytest.mark.parametrize("kwargs, fragment", [
    ({"backend": "cuda"}, "unknown backend 'cuda'"),
    ({"backend": None}, "unknown backend None"),
    ({"n_ctx": 0}, "n_ctx must be a positive integer, got 0"),
    ({"n_ctx": -8}, "n_ctx must be a positive integer"),
    ({"n_ctx": 64.0}, "n_ctx must be a positive integer"),
    ({"n_ctx": "64"}, "n_ctx must be a positive integer"),
    ({"n_ctx": True}, "n_ctx must be a positive integer"),
    ({"n_ctx": 10**12}, "exceeds the 4096 tokens this model was trained on"),
    ({"seed": -3}, "seed must be an integer"),
    ({"seed": "x"}, "seed must be an integer"),
])
def test_api_rejects_bad_construction(path, kwargs, fragment):
    with pytest.raises(InvalidParameterError, match=fragment):
        LLM(path, **{"backend": "numpy", **kwargs})


@pytest.mark.parametrize("args, code, fragment", [
    (["-n", "-2"], 1, "-n/--n-predict must be >= 0, or -1"),     # -1: until the context is full
    (["--temp", "-0.5"], 1, "temperature must be >= 0"),
    (["--temp", "nan"], 1, "temperature must be a number"),
    (["--temp", "inf"], 1, "temperature must be finite"),
    (["--top-p", "0"], 1, "top_p must be in (0, 1]"),
    (["--top-p", "1.01"], 1, "top_p must be in (0, 1]"),
    (["--top-k", "-2"], 1, "top_k must be >= 0"),
    (["--min-p", "1.5"], 1, "min_p must be in [0, 1]"),
    (["--repeat-penalty", "0"], 1, "repeat_penalty must be > 0"),
    (["--seed", "-1"], 1, "seed must be an integer in [0, 2**64)"),
    (["--seed", str(2**64)], 1, "seed must be an integer in [0, 2**64)"),
    (["--stop", ""], 1, "stop strings must be non-empty"),
    (["--n-ctx", "0"], 1, "n_ctx must be a positive integer, got 0"),
    (["--n-ctx", "-4"], 1, "n_ctx must be a positive integer"),
    (["--n-ctx", "99999999"], 1, "n_ctx=99999999 exceeds"),
    (["--seed", "abc"], 2, "'abc' is not a valid integer"),       # click's own type checks: usage errors
    (["-n", "many"], 2, "'many' is not a valid integer"),
    (["--temp", "warm"], 2, "'warm' is not a valid float"),
    (["--backend", "cuda"], 2, "'cuda' is not one of"),
])
def test_cli_rejects_bad_parameters(path, args, code, fragment):
    res = invoke("run", "-m", path, "-p", "Hi", "--backend", "numpy", *args)
    assert res.exit_code == code, res.output
    lines = [line for line in res.stderr.splitlines() if line.startswith("Error:")]
    assert len(lines) == 1 and fragment in lines[0], res.stderr
    assert "Traceback" not in res.output and res.stdout == ""


# -- 3. (CLI side) errors are one line; --verbose shows the traceback --------------------------------------
@pytest.mark.parametrize("exc, expected", [
    (DeviceError("node 'blk.0.attn_norm' (op rms_norm, ...): submitting 3 dispatches failed: Validation Error"),
     "Error: node 'blk.0.attn_norm' (op rms_norm, ...): submitting 3 dispatches failed: Validation Error"),
    (RuntimeError("boom"), "Error: RuntimeError: boom (run with --verbose for the traceback)"),
])
def test_cli_errors_are_one_line_and_verbose_shows_the_traceback(path, monkeypatch, exc, expected):
    def failing(self, prompt, params=None, **kw):
        raise exc
    monkeypatch.setattr(LLM, "stream", failing)
    res = invoke("run", "-m", path, "-p", "x", "--backend", "numpy", "--n-ctx", "64")
    assert res.exit_code == 1 and res.stderr.strip().splitlines()[-1] == expected
    assert [line.startswith("Error:") for line in res.stderr.splitlines()].count(True) == 1
    verbose = invoke("run", "-m", path, "-p", "x", "--backend", "numpy", "--n-ctx", "64", "--verbose")
    assert verbose.exit_code == 1 and verbose.exception is exc and verbose.exc_info[2] is not None
