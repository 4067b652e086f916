"""The README's table of architectures and quant types is what the registries say today."""
from pathlib import Path

from oxigpu.models.support import BEGIN, END, markdown


def test_readme_support_table_is_current():
    text = (Path(__file__).resolve().parents[1] / "README.md").read_text(encoding="utf-8")
    table = text[text.index(BEGIN) + len(BEGIN):text.index(END)].strip()
    assert table == markdown().strip(), "run `python -m oxigpu.models.support` to regenerate README.md's table"
