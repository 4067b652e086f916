"""Every script in examples/ runs to completion on a tiny synthetic model (its optional argument)."""
from __future__ import annotations

import runpy
import sys
from pathlib import Path

import pytest

EXAMPLES = Path(__file__).resolve().parent.parent / "examples"
SCRIPTS = ("generate.py", "stream.py", "chat.py", "sampling.py", "perplexity.py", "openai_client.py")


def test_every_example_is_tested():
    assert sorted(p.name for p in EXAMPLES.glob("*.py")) == sorted(SCRIPTS)


@pytest.mark.parametrize("script", SCRIPTS)
def test_example_runs(script, tiny_models, monkeypatch, capsys):
    monkeypatch.setattr(sys, "argv", [script, tiny_models["tiny-qwen2"]])
    runpy.run_path(str(EXAMPLES / script), run_name="__main__")
    out = capsys.readouterr().out
    assert out.strip()
    if script == "sampling.py":          # the same seed twice gives the same text
        lines = dict(line.split(": ", 1) for line in out.splitlines() if line.startswith("--- "))
        assert lines["--- seed 42"] == lines["--- seed 42 again"]
