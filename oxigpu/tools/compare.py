"""oxigpu against llama.cpp on the same files, one engine after the other (``oxigpu bench --compare-llamacpp``).

Per row (a shape and type that ``oxigpu synth`` writes, or one given GGUF file) the file is written (random
weights: speed does not depend on their values), ``oxigpu bench`` runs on it in a fresh process, then
llama.cpp's ``llama-bench`` on the same file, and the row's tests (pp<P>, tg<N> at each depth) are put side
by side: each engine's median over its timed runs, the min..max of those runs, and the ratio of the medians.
Both columns come from this run; nothing is copied from an earlier table. With ``--no-llamacpp`` llama.cpp
is not run and the table says that no ratio is claimed (a dry run of the driver, e.g. without a GPU).

Writes under ``out``: ``table.md`` (hardware, versions, the command and the table), ``results.json`` (every
per-run rate and both engines' raw output) and ``log.txt`` (progress and both engines' stderr). A row that
fails records its error and the table goes on; with ``budget_s`` the rows that can no longer start are listed
as skipped, so a time-limited call still ends with a table.
"""
from __future__ import annotations

import datetime
import json
import os
import platform
import shutil
import statistics
import subprocess
import sys
import tempfile
import time
from collections.abc import Callable, Sequence
from dataclasses import dataclass, field
from importlib import metadata
from pathlib import Path
from typing import Any

from .._version import __version__
from ..errors import InvalidParameterError
from ..quant import kvcache as kvq
from ..synth import FTYPES, SHAPES

DEFAULT_ROWS = "qwen2.5-0.5b:Q4_K_M,llama-3.2-1b:Q4_K_M,llama-3.1-8b:Q4_K_M"
DEFAULT_LLAMACPP_ARGS = ("-ngl", "99", "-fa", "1")
"""Every layer on the GPU and flash attention: llama.cpp's fastest single-GPU settings, as oxigpu runs."""
MIN_ROW_S = 20.0
"""A row is not started with less of the budget left (its model load alone can take that long)."""

Log = Callable[[str], None]


@dataclass(frozen=True)
class Row:
    label: str
    shape: str | None = None            # synthesized rows
    ftype: str | None = None
    path: Path | None = None            # a given file


@dataclass(frozen=True)
class Metric:
    name: str                           # "pp512", "tg128", "tg128 @ d4096"
    n_prompt: int
    n_gen: int
    depth: int


@dataclass
class Settings:
    n_prompt: int = 512
    n_gen: int = 128
    depths: Sequence[int] = (0, 4096)
    reps: int = 5
    backend: str = "auto"
    llamacpp: Path | None = None        # folder of llama.cpp's binaries; None: not run (no ratio)
    llamacpp_args: Sequence[str] = DEFAULT_LLAMACPP_ARGS
    out: Path = Path("bench-compare")
    files: Path | None = None           # keep (and reuse) the synthesized files here
    budget_s: float | None = None
    command: str = ""                   # as typed, for the report
    cache_types: tuple[str, str] = ("f16", "f16")   # KV cache types, passed to both (-ctk, -ctv)
    tests: list[Metric] = field(init=False)

    def __post_init__(self) -> None:
        if self.n_prompt < 0 or self.n_gen < 0 or not (self.n_prompt or self.n_gen):
            raise InvalidParameterError(f"need n_prompt >= 0 and n_gen >= 0, not both 0 "
                                        f"(got {self.n_prompt}, {self.n_gen})")
        if not self.depths or min(self.depths) < 0:
            raise InvalidParameterError(f"depths must be integers >= 0, got {list(self.depths)}")
        if self.reps < 1:
            raise InvalidParameterError(f"reps must be >= 1, got {self.reps}")
        if self.llamacpp is not None and not (self.llamacpp / "llama-bench").is_file():
            raise InvalidParameterError(f"no llama-bench in {self.llamacpp}: pass the folder of llama.cpp's "
                                        "binaries (e.g. build/bin), or --no-llamacpp to run oxigpu alone")
        self.depths = sorted(set(self.depths))
        self.cache_types = tuple(kvq.check_type(t, w) for t, w in zip(self.cache_types, ("-ctk", "-ctv")))
        self.tests = [Metric(f"pp{self.n_prompt}" + (f" @ d{d}" if d else ""), self.n_prompt, 0, d)
                      for d in (self.depths if self.n_prompt else ())] + [
            Metric(f"tg{self.n_gen}" + (f" @ d{d}" if d else ""), 0, self.n_gen, d)
            for d in (self.depths if self.n_gen else ())]


def parse_rows(text: str) -> list[Row]:
    """``"shape:TYPE,shape:TYPE"`` (``oxigpu synth``'s shapes and types) as rows."""
    rows = []
    for item in filter(None, (s.strip() for s in text.split(","))):
        shape, _, ftype = item.partition(":")
        ftype = ftype.upper() or "Q4_K_M"
        if shape not in SHAPES:
            raise InvalidParameterError(f"--rows: unknown shape {shape!r}; choose from {', '.join(SHAPES)}")
        if ftype not in FTYPES:
            raise InvalidParameterError(f"--rows: unknown type {ftype!r} in {item!r}; choose from "
                                        f"{', '.join(FTYPES)}")
        rows.append(Row(f"{shape} {ftype}", shape=shape, ftype=ftype))
    if not rows:
        raise InvalidParameterError(f"--rows names no row: {text!r}")
    return rows


def spread(runs: Sequence[float]) -> dict[str, Any]:
    """The figure and spread of one test, computed alike for both engines from their per-run rates."""
    return {"median": statistics.median(runs), "min": min(runs), "max": max(runs), "runs": list(runs)}


def compare(rows: Sequence[Row], s: Settings, log: Log | None = None) -> dict[str, Any]:
    """Run every row as the module docstring says; returns what ``results.json`` holds."""
    s.out.mkdir(parents=True, exist_ok=True)
    log_file = (s.out / "log.txt").open("w", encoding="utf-8")
    start = time.monotonic()

    def say(line: str) -> None:
        log_file.write(line + "\n")
        log_file.flush()
        if log:
            log(line)

    if s.llamacpp is None:
        say("--no-llamacpp: llama.cpp is not run; no ratio is claimed")
    result: dict[str, Any] = {"settings": _settings_json(s), "environment": _environment(s), "rows": []}
    scratch = Path(tempfile.mkdtemp(prefix="oxigpu-compare-")) if s.files is None else s.files
    scratch.mkdir(parents=True, exist_ok=True)
    try:
        for row in rows:
            left = None if s.budget_s is None else s.budget_s - (time.monotonic() - start)
            entry: dict[str, Any] = {"row": row.label, "file": None, "file_bytes": None, "error": None,
                                     "oxigpu": None, "llamacpp": None}
            result["rows"].append(entry)
            if left is not None and left < MIN_ROW_S:
                entry["error"] = f"skipped: {max(left, 0):.0f} s left of the {s.budget_s:.0f} s budget"
                say(f"=== {row.label}: {entry['error']}")
                continue
            say(f"=== {row.label}")
            _run_row(row, s, scratch, entry, start, say)
            _write(result, s)
    finally:
        if s.files is None:
            shutil.rmtree(scratch, ignore_errors=True)
        log_file.close()
    _write(result, s)
    return result


def _run_row(row: Row, s: Settings, scratch: Path, entry: dict[str, Any], start: float, say: Log) -> None:
    def left() -> float | None:
        return None if s.budget_s is None else max(1.0, s.budget_s - (time.monotonic() - start))

    path = row.path
    try:
        path = path or _synth(row, scratch, left(), say)
        entry["file"], entry["file_bytes"] = str(path), path.stat().st_size
        entry["oxigpu"] = _oxigpu(path, s, left(), say)
        if s.llamacpp is not None:
            try:
                entry["llamacpp"] = _llamacpp(path, s, left(), say)
            except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
                entry["llamacpp"] = {"error": _one_line(e)}
                say(f"=== {row.label}: llama.cpp: {entry['llamacpp']['error']}")
    except (OSError, RuntimeError, subprocess.TimeoutExpired, ValueError) as e:
        entry["error"] = _one_line(e)
        say(f"=== {row.label}: {entry['error']}")
    finally:
        if s.files is None and row.path is None and path is not None:
            path.unlink(missing_ok=True)     # the next row's file may need the disk


def _one_line(e: BaseException) -> str:
    if isinstance(e, subprocess.TimeoutExpired):
        return f"timed out after {e.timeout:.0f} s: {Path(str(e.cmd[0])).name}"
    return (str(e).strip().splitlines() or [type(e).__name__])[-1][:300]


def _env() -> dict[str, str]:
    """The children import the same oxigpu as this process, wherever it was imported from."""
    env = dict(os.environ)
    root = str(Path(__file__).resolve().parents[2])
    env["PYTHONPATH"] = root + (os.pathsep + env["PYTHONPATH"] if env.get("PYTHONPATH") else "")
    return env


def _call(cmd: list[str], timeout: float | None, say: Log) -> str:
    """Run ``cmd``; its stderr goes to the log; returns stdout, raises RuntimeError on a nonzero exit."""
    say("$ " + " ".join(cmd))
    p = subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, env=_env())
    for line in p.stderr.splitlines():
        say("  " + line)
    if p.returncode != 0:
        tail = [ln for ln in p.stderr.splitlines() if ln.strip()][-1:] or [""]
        raise RuntimeError(f"{Path(cmd[0]).name} exit {p.returncode}: {tail[0]}")
    return p.stdout


def _synth(row: Row, scratch: Path, timeout: float | None, say: Log) -> Path:
    """The row's file in ``scratch``, written unless a finished one is there (same seed, same bytes)."""
    path = scratch / f"{row.shape}-{row.ftype}.gguf"
    if path.is_file():
        say(f"reusing {path}")
        return path
    tmp = path.with_suffix(".gguf.part")
    say(_call([sys.executable, "-m", "oxigpu", "synth", str(row.shape), "--type", str(row.ftype), "-o", str(tmp)],
              timeout, say).strip())
    tmp.replace(path)
    return path


def _oxigpu(path: Path, s: Settings, timeout: float | None, say: Log) -> dict[str, Any]:
    cmd = [sys.executable, "-m", "oxigpu", "bench", "-m", str(path), "-p", str(s.n_prompt), "-n", str(s.n_gen),
           "-d", ",".join(map(str, s.depths)), "-r", str(s.reps), "--backend", s.backend, "--json",
           "-ctk", s.cache_types[0], "-ctv", s.cache_types[1]]
    raw = json.loads(_call(cmd, timeout, say))
    tests = {}
    for t in s.tests:
        got = next((g for g in raw["pp_depths" if t.n_prompt else "tg"] if g.get("depth", 0) == t.depth), None)
        if got:
            tests[t.name] = spread(got["runs"])
    return {"tests": tests, "device": raw["device"], "backend": raw["backend"], "load_s": raw["load_s"],
            "raw": raw}


def _llamacpp(path: Path, s: Settings, timeout: float | None, say: Log) -> dict[str, Any]:
    assert s.llamacpp is not None
    cmd = [str(s.llamacpp / "llama-bench"), "-m", str(path), "-p", str(s.n_prompt), "-n", str(s.n_gen),
           "-d", ",".join(map(str, s.depths)), "-r", str(s.reps), "-o", "json", *s.llamacpp_args,
           *(["-ctk", s.cache_types[0], "-ctv", s.cache_types[1]] if s.cache_types != ("f16", "f16") else [])]
    return parse_llama_bench(_call(cmd, timeout, say), s.tests)


def parse_llama_bench(text: str, tests: Sequence[Metric]) -> dict[str, Any]:
    """llama-bench's ``-o json`` output (one object per test, ``samples_ts`` its per-run rates) for ``tests``.

    llama-bench runs the prompt test at every depth, as oxigpu bench does."""
    try:
        entries = json.loads(text)
    except json.JSONDecodeError as e:
        raise ValueError(f"llama-bench printed no JSON ({e}): {text[:200]!r}") from None
    if not isinstance(entries, list) or not all(isinstance(e, dict) for e in entries):
        raise ValueError("llama-bench's JSON is not a list of tests")
    out: dict[str, Any] = {"tests": {}, "raw": entries}
    for t in tests:
        for e in entries:
            key = (e.get("n_prompt"), e.get("n_gen"), e.get("n_depth", 0))
            if key == (t.n_prompt, t.n_gen, t.depth) and e.get("samples_ts"):
                out["tests"][t.name] = spread([float(x) for x in e["samples_ts"]])
    if entries:
        first = entries[0]
        out["build"] = f"{first.get('build_commit', '?')} (build {first.get('build_number', '?')})"
        out["device"] = f"{first.get('gpu_info') or first.get('cpu_info', '?')} ({first.get('backends', '?')})"
    return out


def _settings_json(s: Settings) -> dict[str, Any]:
    return {"n_prompt": s.n_prompt, "n_gen": s.n_gen, "depths": list(s.depths), "reps": s.reps,
            "backend": s.backend, "llamacpp": str(s.llamacpp) if s.llamacpp else None,
            "llamacpp_args": list(s.llamacpp_args), "command": s.command, "cache_types": list(s.cache_types)}


def _version(dist: str) -> str | None:
    try:
        return metadata.version(dist)
    except metadata.PackageNotFoundError:
        return None


def _environment(s: Settings) -> dict[str, Any]:
    root = Path(__file__).resolve().parents[2]
    commit = None
    if (root / ".git").exists():
        try:
            commit = subprocess.run(["git", "-C", str(root), "describe", "--always", "--dirty"], text=True,
                                    capture_output=True, timeout=10).stdout.strip() or None
        except (OSError, subprocess.TimeoutExpired):
            commit = None
    return {"date": datetime.datetime.now(datetime.UTC).strftime("%Y-%m-%d %H:%M UTC"),
            "oxigpu": __version__, "commit": commit, "python": platform.python_version(),
            "wgpu": _version("wgpu"), "wgpudawn": _version("wgpudawn"), "numpy": _version("numpy"),
            "host": f"{platform.machine()}, {os.cpu_count()} CPU threads"}


def _write(result: dict[str, Any], s: Settings) -> None:
    (s.out / "results.json").write_text(json.dumps(result, indent=1) + "\n", encoding="utf-8")
    (s.out / "table.md").write_text(to_markdown(result), encoding="utf-8")


def _num(x: float) -> str:
    return f"{x:,.0f}" if x >= 100 else f"{x:,.2f}"


def _ct(st: dict[str, Any]) -> str:
    """llama-bench's cache-type options as the command line carried them (none for f16)."""
    ct = st.get("cache_types", ["f16", "f16"])
    return "" if list(ct) == ["f16", "f16"] else f" -ctk {ct[0]} -ctv {ct[1]}"


def to_markdown(result: dict[str, Any]) -> str:
    """The report: what ran where (hardware, versions, the command), then one line per row and test."""
    st, env = result["settings"], result["environment"]
    rows = result["rows"]
    ours_dev = next((r["oxigpu"]["device"] for r in rows if r["oxigpu"]), "?")
    ll = [r["llamacpp"] for r in rows if r["llamacpp"] and "build" in r["llamacpp"]]
    versions = ", ".join(f"{k} {env[k]}" for k in ("wgpu", "wgpudawn", "numpy") if env.get(k))
    lines = [f"- date: {env['date']}; host: {env['host']}",
             f"- oxigpu {env['oxigpu']}" + (f" ({env['commit']})" if env.get("commit") else "")
             + f", Python {env['python']}, {versions}; device: {ours_dev}",
             f"- command: `{st['command']}`" if st.get("command") else None]
    if st["llamacpp"] is None:
        lines.append("- llama.cpp: not run (--no-llamacpp): **no ratio is claimed**")
    elif ll:
        lines.append(f"- llama.cpp {ll[0]['build']} on {ll[0]['device']}: "
                     f"`llama-bench -p {st['n_prompt']} -n {st['n_gen']} -d {','.join(map(str, st['depths']))} "
                     f"-r {st['reps']} {' '.join(st['llamacpp_args'])}{_ct(st)}`")
    if st.get("cache_types", ["f16", "f16"]) != ["f16", "f16"]:
        lines.append(f"- KV cache: K {st['cache_types'][0]}, V {st['cache_types'][1]} (both engines)")
    lines += ["", "| model | test | oxigpu t/s | runs (min–max) | llama.cpp t/s | runs (min–max) | ratio |",
              "|---|---|---:|---:|---:|---:|---:|"]
    names = [f"pp{st['n_prompt']}" + (f" @ d{d}" if d else "") for d in (st["depths"] if st["n_prompt"] else ())] + [
        f"tg{st['n_gen']}" + (f" @ d{d}" if d else "") for d in (st["depths"] if st["n_gen"] else ())]
    for r in rows:
        if r["error"]:
            lines.append(f"| {r['row']} | | {r['error']} | | | | |")
            continue
        ours = r["oxigpu"]["tests"]
        theirs = (r["llamacpp"] or {}).get("tests", {})
        for name in names:
            a, b = ours.get(name), theirs.get(name)
            cells = [_num(a["median"]), f"{_num(a['min'])}–{_num(a['max'])}"] if a else ["", ""]
            if b:
                cells += [_num(b["median"]), f"{_num(b['min'])}–{_num(b['max'])}"]
            else:
                cells += [(r["llamacpp"] or {}).get("error", "not run" if st["llamacpp"] is None else "missing"), ""]
            cells.append(f"{a['median'] / b['median']:.2f}" if a and b else "")
            lines.append(f"| {r['row']} | {name} | " + " | ".join(cells) + " |")
    lines += ["", f"Median of {st['reps']} timed runs after warm-up for both engines; runs: the slowest and "
                  f"fastest of them; ratio = oxigpu / llama.cpp medians. oxigpu backend: {st['backend']}."]
    return "\n".join(x for x in lines if x is not None) + "\n"
