"""The README renders as meant (every code fence closed and labelled, every heading outside code) and its
commands run as written: each `oxigpu` line of its bash blocks and its Python example, with generation
lengths cut to a couple of tokens (the default model on the numpy backend, or a tiny synthetic file the
README itself writes)."""
from __future__ import annotations

import os
import re
import shlex
import subprocess
import sys
from pathlib import Path

import pytest

README = Path(__file__).resolve().parent.parent / "README.md"
HEADING = re.compile(r"^#{1,6} \S")


def _tokens():
    markdown_it = pytest.importorskip("markdown_it", reason="markdown-it-py is in the test extra")
    text = README.read_text(encoding="utf-8")
    return text.splitlines(), markdown_it.MarkdownIt("commonmark").parse(text)


def _fences() -> list:
    _, tokens = _tokens()
    return [t for t in tokens if t.type == "fence"]


def test_readme_fences_are_closed_and_headings_are_outside_code():
    lines, tokens = _tokens()
    fences = [t for t in tokens if t.type == "fence"]
    assert fences
    for f in fences:
        start, end = f.map
        closing = lines[end - 1].strip() if end - 1 > start else ""
        # a fence that is never closed runs to the end of the file; a closed one ends on its own fence line
        assert closing and set(closing) == set(f.markup[0]) and len(closing) >= len(f.markup), (
            f"the code fence opened on line {start + 1} is not closed")
        # a bare fence is where a stray closing fence starts swallowing prose: every block names its language
        assert f.info.strip(), f"the code fence on line {start + 1} names no language"
        inside = [line for line in f.content.splitlines() if re.match(r"^#{2,6} \S", line)]
        assert not inside, f"headings inside the code block of line {start + 1}: {inside}"
    headings = {t.map[0] for t in tokens if t.type == "heading_open"}
    in_code = {i for f in fences for i in range(f.map[0], f.map[1])}
    for i, line in enumerate(lines):
        if i not in in_code:
            assert not HEADING.match(line) or i in headings, f"line {i + 1} looks like a heading but is not one"
            assert not re.match(r"^(oxigpu|\./setup\.sh|echo|printf) ", line), (
                f"line {i + 1} is a command outside a code block: {line!r}")
    titles = [lines[i] for i in sorted(headings)]
    for want in ("## Two commands", "## Commands", "## Python API", "## Architecture"):
        assert want in titles


def _cli_lines(servers: bool = False) -> list[str]:
    """Every line of a bash block that runs `oxigpu` (directly or at the end of a pipe); `oxigpu serve` runs
    until stopped, so it is left out unless `servers` (tests/test_server*.py drive the server)."""
    out = []
    for f in _fences():
        if f.info.strip() != "bash":
            continue
        for line in f.content.splitlines():
            if re.search(r"(^|\|\s*)oxigpu ", line) and (servers or not re.search(r"oxigpu serve\b", line)):
                out.append(line)
    return out


def _shorten(line: str) -> str:
    """The same command, cheaper: a couple of generated tokens, and a small pp/tg with one run in bench."""
    command = line.split("  #")[0].strip()
    command = re.sub(r"(\s)-n \d+", r"\1-n 2", command)
    if " bench " in command:
        command = re.sub(r"(\s)-p \d+", r"\1-p 8", command) + " -r 1"
    return command


def test_readme_has_the_commands_it_promises():
    verbs = {shlex.split(_shorten(line).split("|")[-1])[1] for line in _cli_lines(servers=True)}
    assert {"run", "chat", "models", "tokenize", "info", "synth", "diff", "kernels", "bench", "serve"} <= verbs


@pytest.fixture(scope="module")
def default_model():
    from oxigpu import model_packages
    from oxigpu.errors import ModelNotFoundError
    try:
        return model_packages.default_model()
    except ModelNotFoundError as e:
        pytest.skip(str(e))


@pytest.mark.realmodel
def test_readme_cli_lines_run_as_written(default_model, tmp_path):
    from oxigpu.backends.wgpu.device import Device
    from oxigpu.errors import DeviceError
    try:
        Device.get()
        gpu = True
    except DeviceError:
        gpu = False
    env = {k: v for k, v in os.environ.items() if k != "XDG_RUNTIME_DIR"}
    env["PYTHONPATH"] = os.pathsep.join([str(README.parent), env.get("PYTHONPATH", "")])
    # `oxigpu` is this interpreter's module, whatever is on PATH
    prelude = f'oxigpu() {{ {shlex.quote(sys.executable)} -m oxigpu "$@"; }}\n'
    for line in _cli_lines():
        command = _shorten(line)
        if not gpu and re.search(r"oxigpu (diff|kernels)|--device", command):
            continue
        res = subprocess.run(["bash", "-c", prelude + command], cwd=tmp_path, env=env, capture_output=True,
                             text=True, timeout=600, check=False)
        assert res.returncode == 0, f"{command}\n{res.stderr}"
        assert res.stdout.strip(), command
        assert "XDG_RUNTIME_DIR" not in res.stderr and "Traceback" not in res.stderr, res.stderr
        if command.startswith("oxigpu run -p \"The capital"):
            assert res.stdout.startswith("The capital of France is")         # the prompt is echoed
            assert len(res.stderr.strip().splitlines()) == 2, res.stderr   # loading line, timing line


@pytest.mark.realmodel
def test_readme_python_example_runs(default_model, capsys):
    blocks = [f.content for f in _fences() if f.info.strip() == "python"]
    assert blocks
    source = re.sub(r"max_tokens=\d+", "max_tokens=2", blocks[0])
    exec(compile(source, str(README), "exec"), {"__name__": "readme"})   # noqa: S102 - our own README
    assert capsys.readouterr().out.strip()
