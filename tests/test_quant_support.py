"""The README's table of quant types is what the registries say today, and it says every type runs on
the GPU."""
from pathlib import Path

from oxigpu.quant import SUPPORTED
from oxigpu.quant.support import BEGIN, END, markdown, rows


def test_readme_quant_table_is_current():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert table == markdown().strip(), "run `python -m oxigpu.quant.support` to regenerate README.md's table"


def test_every_type_runs_on_the_gpu():
    r = {x["name"]: x for x in rows()}
    assert set(r) == set(SUPPORTED) and all(x["gpu"] and x["mma"] for x in r.values())
    assert {n for n, x in r.items() if not x["int8"]} == {"F32", "F16", "BF16", "Q2_K"}
