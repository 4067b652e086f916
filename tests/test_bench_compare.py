"""`oxigpu bench --compare-llamacpp` / `--no-llamacpp`: the driver of BENCHMARKS.md's table, end to end on the
numpy backend with tiny synthetic files. llama.cpp is not built in CI, so the llama.cpp path runs against a
stand-in `llama-bench` script that checks the arguments it is given (the same file oxigpu just ran, the
tests' settings) and prints llama-bench's JSON schema; the parser is also checked on that schema directly."""
from __future__ import annotations

import json
import os
import stat
import sys
from pathlib import Path

import pytest
from click.testing import CliRunner

from oxigpu.cli.main import cli
from oxigpu.errors import InvalidParameterError
from oxigpu.tools.compare import Metric, parse_llama_bench, parse_rows

SETTINGS = ["-p", "16", "-n", "4", "-d", "0,8", "-r", "2", "--backend", "numpy"]
TESTS = [Metric("pp16", 16, 0, 0), Metric("pp16 @ d8", 16, 0, 8), Metric("tg4", 0, 4, 0), Metric("tg4 @ d8", 0, 4, 8)]
# per-run rates the stand-in reports, per (n_prompt, n_gen, n_depth)
SAMPLES = {(16, 0, 0): [100.0, 300.0, 200.0], (0, 4, 0): [10.0, 30.0, 20.0], (16, 0, 8): [7.0, 7.0, 7.0],
           (0, 4, 8): [5.0, 4.0, 6.0]}

STAND_IN = '''#!{python}
"""Stands in for llama-bench: checks its arguments, prints llama-bench's -o json schema."""
import json, os, sys
a = sys.argv[1:]
opt = lambda k: a[a.index(k) + 1]
assert opt("-o") == "json" and opt("-r") == "2" and opt("-ngl") == "99" and opt("-fa") == "1", a
assert os.path.isfile(opt("-m")) and opt("-m").endswith(".gguf"), a
with open(os.path.join(os.path.dirname(sys.argv[0]), "seen.txt"), "a") as f:
    f.write(opt("-m") + "\\n")
with open(os.path.join(os.path.dirname(sys.argv[0]), "args.txt"), "a") as f:
    f.write(" ".join(a) + "\\n")
p, n, depths = int(opt("-p")), int(opt("-n")), [int(d) for d in opt("-d").split(",")]
samples = {samples!r}
tests = [(p, 0, d) for d in depths] + [(0, n, d) for d in depths]
print(json.dumps([{{"build_commit": "abc1234", "build_number": 42, "gpu_info": "Stand-in GPU", "backends": "CPU",
                   "n_prompt": t[0], "n_gen": t[1], "n_depth": t[2], "samples_ts": samples[t]}} for t in tests]))
print("llama-bench log line", file=sys.stderr)
'''


@pytest.fixture(scope="module")
def tiny(tmp_path_factory) -> Path:
    from oxigpu.synth import synthesize
    return synthesize("tiny-llama", tmp_path_factory.mktemp("cmp") / "tiny-llama.gguf", ftype="Q8_0", seed=1).path


def _stand_in(folder: Path) -> Path:
    exe = folder / "llama-bench"
    exe.write_text(STAND_IN.format(python=sys.executable, samples=SAMPLES))
    exe.chmod(exe.stat().st_mode | stat.S_IXUSR)
    return folder


def _num(cell: str) -> float:
    return float(cell.replace(",", ""))


def _table_rows(md: str) -> dict[tuple[str, str], list[str]]:
    rows = {}
    for line in md.splitlines():
        cells = [c.strip() for c in line.strip("|").split("|")]
        if line.startswith("| ") and len(cells) == 7 and cells[1] and cells[0] != "model":
            rows[(cells[0], cells[1])] = cells[2:]
    return rows


def test_compare_with_llamacpp_on_the_same_file(tiny, tmp_path):
    bin_dir = _stand_in(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", "--compare-llamacpp", str(bin_dir), "-m", str(tiny), *SETTINGS,
                                   "--out", str(out)])
    assert res.exit_code == 0, res.output
    assert (bin_dir / "seen.txt").read_text().split() == [str(tiny)]     # llama.cpp ran on oxigpu's file
    result = json.loads((out / "results.json").read_text())
    (row,) = result["rows"]
    assert row["error"] is None and row["llamacpp"]["build"] == "abc1234 (build 42)"
    ours = row["oxigpu"]["tests"]
    assert set(ours) == {"pp16", "pp16 @ d8", "tg4", "tg4 @ d8"}
    for t in ours.values():
        assert len(t["runs"]) == 2 and t["min"] <= t["median"] <= t["max"] and t["min"] > 0
    table = (out / "table.md").read_text()
    assert table in res.output and "Stand-in GPU (CPU)" in table and "llama.cpp abc1234" in table
    rows = _table_rows(table)
    assert set(rows) == {("tiny-llama", "pp16"), ("tiny-llama", "pp16 @ d8"), ("tiny-llama", "tg4"),
                         ("tiny-llama", "tg4 @ d8")}
    for name, key in (("pp16", (16, 0, 0)), ("pp16 @ d8", (16, 0, 8)), ("tg4", (0, 4, 0)), ("tg4 @ d8", (0, 4, 8))):
        a, a_range, b, b_range, ratio = rows[("tiny-llama", name)]
        s = sorted(SAMPLES[key])
        assert _num(b) == s[1] and [_num(x) for x in b_range.split("–")] == [s[0], s[2]]
        assert _num(a) == pytest.approx(ours[name]["median"], rel=0.01)
        assert [_num(x) for x in a_range.split("–")] == pytest.approx([ours[name]["min"], ours[name]["max"]], rel=0.01)
        assert float(ratio) == pytest.approx(ours[name]["median"] / s[1], abs=0.006)
    assert "llama-bench log line" in (out / "log.txt").read_text()


def test_cache_types_reach_both_engines(tiny, tmp_path):
    """-ctk/-ctv: oxigpu's bench runs with that KV cache and llama-bench is given the same options."""
    bin_dir = _stand_in(tmp_path)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", "--compare-llamacpp", str(bin_dir), "-m", str(tiny), *SETTINGS,
                                   "-ctk", "q8_0", "-ctv", "q4_0", "--out", str(out)])
    assert res.exit_code == 0, res.output
    args = (bin_dir / "args.txt").read_text().split()
    assert args[args.index("-ctk") + 1] == "q8_0" and args[args.index("-ctv") + 1] == "q4_0"
    (row,) = json.loads((out / "results.json").read_text())["rows"]
    assert row["oxigpu"]["raw"]["cache_types"] == ["q8_0", "q4_0"]
    assert "K q8_0, V q4_0" in (out / "table.md").read_text()


def test_no_llamacpp_synthesizes_rows_and_claims_no_ratio(tmp_path):
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", "--no-llamacpp", "--rows", "tiny-qwen3:q8_0", *SETTINGS,
                                   "--out", str(out), "--files", str(tmp_path / "files")])
    assert res.exit_code == 0, res.output
    assert "no ratio is claimed" in res.output
    assert (tmp_path / "files" / "tiny-qwen3-Q8_0.gguf").is_file()        # kept for reuse with --files
    rows = _table_rows((out / "table.md").read_text())
    assert set(rows) == {("tiny-qwen3 Q8_0", t.name) for t in TESTS}
    for cells in rows.values():
        assert _num(cells[0]) > 0 and cells[2] == "not run" and cells[4] == ""


def test_a_failing_llamacpp_keeps_oxigpus_figures(tiny, tmp_path):
    (tmp_path / "llama-bench").write_text("#!/bin/sh\necho 'error: unknown model architecture' >&2\nexit 1\n")
    (tmp_path / "llama-bench").chmod(0o755)
    out = tmp_path / "out"
    res = CliRunner().invoke(cli, ["bench", "--compare-llamacpp", str(tmp_path), "-m", str(tiny),
                                   "-p", "8", "-n", "0", "-d", "0", "-r", "1", "--backend", "numpy", "--out", str(out)])
    assert res.exit_code == 0, res.output
    ((_, cells),) = _table_rows((out / "table.md").read_text()).items()
    assert _num(cells[0]) > 0
    assert cells[2] == "llama-bench exit 1: error: unknown model architecture" and cells[4] == ""


def test_parse_llama_bench():
    entries = [{"n_prompt": 16, "n_gen": 0, "n_depth": 0, "samples_ts": [3, 1, 2]},
               {"n_prompt": 16, "n_gen": 0, "n_depth": 8, "samples_ts": [9]},
               {"n_prompt": 0, "n_gen": 4, "n_depth": 8, "samples_ts": [5.5, 4.5]}]
    got = parse_llama_bench(json.dumps(entries), TESTS)["tests"]
    assert got == {"pp16": {"median": 2, "min": 1, "max": 3, "runs": [3, 1, 2]},
                   "pp16 @ d8": {"median": 9, "min": 9, "max": 9, "runs": [9]},
                   "tg4 @ d8": {"median": 5.0, "min": 4.5, "max": 5.5, "runs": [5.5, 4.5]}}
    for bad in ("", "{\"n_prompt\": 1}", "main: error"):
        with pytest.raises(ValueError, match="llama-bench"):
            parse_llama_bench(bad, TESTS)


@pytest.mark.parametrize("args, fragment", [
    (["--rows", "tiny-llama:Q8_0"], "--rows needs --compare-llamacpp DIR or --no-llamacpp"),
    (["--no-llamacpp", "--rows", "nope:Q8_0"], "unknown shape 'nope'"),
    (["--no-llamacpp", "--rows", "tiny-llama:Q9"], "unknown type 'Q9'"),
    (["--no-llamacpp", "--profile"], "--profile is not taken by the comparison"),
    (["--no-llamacpp", "-m", "x.gguf", "--rows", "tiny-llama"], "give -m FILE or --rows, not both"),
    (["--compare-llamacpp", "."], "no llama-bench in ."),
    (["--compare-llamacpp", ".", "--no-llamacpp"], "exclude each other"),
])
def test_bad_comparison_arguments(args, fragment, tmp_path):
    res = CliRunner().invoke(cli, ["bench", *args, "--out", str(tmp_path / "o")])
    assert res.exit_code != 0 and fragment in res.output, res.output


def test_parse_rows_defaults_to_q4_k_m():
    assert [(r.shape, r.ftype) for r in parse_rows("tiny-llama, tiny-qwen2:f16")] == [
        ("tiny-llama", "Q4_K_M"), ("tiny-qwen2", "F16")]
    with pytest.raises(InvalidParameterError):
        parse_rows(" , ")


def test_children_import_this_oxigpu():
    from oxigpu.tools.compare import _env
    root = str(Path(__file__).resolve().parents[1])
    assert _env()["PYTHONPATH"].split(os.pathsep)[0] == root
