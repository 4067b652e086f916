"""`oxigpu models`: the models that ship as PyPI packages, whether they are installed, and where the file is.

Nothing is assembled or downloaded here: a packaged model kept in chunks is assembled on its first use.
"""
from __future__ import annotations

import json
from pathlib import Path
from typing import Any

import click

from ..errors import OxigpuError
from ..model_packages import DEFAULT_MODEL, MODELS, PackagedModel


def describe(m: PackagedModel) -> dict[str, Any]:
    """One packaged model's entry: installed or not, its file (when it exists yet) and how it is stored."""
    entry: dict[str, Any] = {"name": m.name, "default": m.name == DEFAULT_MODEL, "description": m.description,
                             "installed": m.installed(), "install": m.pip, "stored": m.stored, "path": None,
                             "sampling": dict(m.sampling)}
    cached = m.cached_at()
    if entry["installed"]:
        if cached is None:          # used in place: locating it is cheap and reads nothing
            try:
                entry["path"] = str(m.locate(lambda line: None))
            except OxigpuError as e:
                entry["installed"], entry["problem"] = False, str(e)
        elif cached.is_file():
            entry["path"] = str(cached)
        else:
            entry["path"] = None
            entry["stored"] += f" into {cached.parent} on first use"
    if entry["path"]:
        entry["bytes"] = Path(entry["path"]).stat().st_size
    return entry


@click.command("models")
@click.option("--json", "as_json", is_flag=True, help="Print a JSON list instead of text.")
def models(as_json: bool) -> None:
    """List the packaged models (usable by name with -m), whether each is installed, and where its file is."""
    entries = [describe(m) for m in MODELS.values()]
    if as_json:
        click.echo(json.dumps(entries, indent=1))
        return
    for e in entries:
        mark = " (default)" if e["default"] else ""
        click.echo(f"{e['name']}{mark}: {e['description']}")
        if e["installed"]:
            where = e["path"] or "not assembled yet"
            size = f", {e['bytes'] / 1e6:.0f} MB" if e.get("bytes") else ""
            click.echo(f"  installed: {where}{size}\n  stored: {e['stored']}")
        if e["sampling"]:
            settings = ", ".join(f"{k} {v:g}" for k, v in e["sampling"].items())
            click.echo(f"  default sampling: {settings} (its authors' recommendation; -t/--temp etc. override)")
        else:
            click.echo(f"  not installed{': ' + e['problem'] if e.get('problem') else ''}\n  install: {e['install']}")
