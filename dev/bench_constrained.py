"""Constrained vs unconstrained decode speed, oxigpu beside llama.cpp, on the same synthetic files.

    python3 dev/bench_constrained.py --llama-bin /tmp/llamacpp/build/bin --out $OUT [--shapes llama-3.2-1b,llama-3.1-8b]

Per shape (random-weight Q4_K_M files written by ``oxigpu synth``): tokens/s of a generation with the
mid-size JSON Schema below (temperature 0.8, outputs of ~150-250 tokens: an array of records with bounded
strings, enums, numbers and nested objects) against a free generation of the same length (end-of-generation
banned), each the median of --reps runs after a warm-up; then llama.cpp's ``llama-completion`` on the same
file, with and without ``--json-schema`` (its own grammar path), its eval rate read from its perf line.
Prints one table (also written to $OUT/table.md; raw runs in $OUT/runs.jsonl): the ratio constrained/free
for each engine, and oxigpu/llama.cpp for each mode. Random weights make the text meaningless but the work
per token real: the constraint engine sees arbitrary tokens within the schema.
"""
from __future__ import annotations

import argparse
import json
import math
import re
import statistics
import subprocess
import sys
import tempfile
import time
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu import LLM  # noqa: E402
from oxigpu.synth import synthesize  # noqa: E402

WORD = {"type": "string", "minLength": 3, "maxLength": 12}
SCHEMA = {
    "type": "object",
    "properties": {
        "title": {"type": "string", "maxLength": 24},
        "records": {"type": "array", "minItems": 6, "maxItems": 8, "items": {
            "type": "object",
            "properties": {
                "id": {"type": "integer", "minimum": 0, "maximum": 9999},
                "name": WORD,
                "kind": {"enum": ["alpha", "beta", "gamma", "delta"]},
                "score": {"type": "number", "minimum": 0, "maximum": 100},
                "tags": {"type": "array", "maxItems": 2, "items": WORD},
                "owner": {"type": "object", "properties": {"user": WORD, "active": {"type": "boolean"}},
                          "required": ["user", "active"], "additionalProperties": False},
            },
            "required": ["id", "name", "kind", "score", "owner"], "additionalProperties": False}},
    },
    "required": ["title", "records"], "additionalProperties": False,
}
PROMPT = "Write the inventory as JSON."
_EVAL = re.compile(r"eval time =\s*([\d.]+) ms /\s*(\d+) (?:runs|tokens)")


def ours(path: Path, backend: str, reps: int) -> dict:
    llm = LLM(path, backend=backend, n_ctx=2048)
    ban = {t: -math.inf for t in llm.tokenizer.eog_ids}
    out = {}
    for mode in ("json_schema", "free"):
        rates, lens = [], []
        for i in range(reps + 1):
            if mode == "json_schema":
                r = llm.generate(PROMPT, json_schema=SCHEMA, temperature=0.8, seed=i, max_tokens=600)
                n = len(r.token_ids)
            else:           # the same length as the constrained run before it
                r = llm.generate(PROMPT, temperature=0.8, seed=i, max_tokens=max(32, lens[-1] if lens else 200),
                                 logit_bias=ban)
                n = len(r.token_ids)
            if i:           # the first run warms up (pipelines, the constraint's tokenizer)
                rates.append(r.timings.tokens_per_s)
            lens.append(n)
            if mode == "json_schema" and r.finish_reason == "stop":
                json.loads(r.text)
        out[mode] = {"tokens_per_s": statistics.median(rates), "runs": rates, "tokens": lens}
    return out


def llama_cpp(binary: Path, path: Path, n: int, reps: int) -> dict:
    out = {}
    for mode in ("json_schema", "free"):
        rates = []
        for i in range(reps + 1):
            cmd = [str(binary), "-m", str(path), "-p", PROMPT, "-n", str(n if mode == "free" else 600),
                   "--temp", "0.8", "--seed", str(i), "-ngl", "99", "-no-cnv", "-c", "2048"]
            cmd += ["--json-schema", json.dumps(SCHEMA)] if mode == "json_schema" else ["--ignore-eos"]
            p = subprocess.run(cmd, capture_output=True, text=True, errors="replace",   # its output: any bytes
                               stdin=subprocess.DEVNULL, timeout=300)
            m = [x for x in _EVAL.finditer(p.stderr + p.stdout)]
            if not m:
                raise RuntimeError(f"no eval line from {' '.join(cmd[:3])}: {(p.stderr or p.stdout)[-800:]}")
            ms, runs = float(m[-1].group(1)), int(m[-1].group(2))
            if i:
                rates.append(1000.0 * runs / ms)
        out[mode] = {"tokens_per_s": statistics.median(rates), "runs": rates}
    return out


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--llama-bin", type=Path, help="llama.cpp's build/bin (llama-completion); omit to skip it")
    ap.add_argument("--out", type=Path, default=Path("/tmp/bench_constrained"))
    ap.add_argument("--shapes", default="llama-3.2-1b,llama-3.1-8b")
    ap.add_argument("--type", default="Q4_K_M")
    ap.add_argument("--backend", default="wgpu")
    ap.add_argument("--reps", type=int, default=3)
    ap.add_argument("--files", type=Path, help="folder of SHAPE-TYPE.gguf files to reuse (written there if absent)")
    a = ap.parse_args()
    a.out.mkdir(parents=True, exist_ok=True)
    rows, log = [], (a.out / "runs.jsonl").open("w")
    binary = None
    if a.llama_bin:
        binary = next((a.llama_bin / b for b in ("llama-completion", "llama-cli") if (a.llama_bin / b).exists()), None)
        if binary is None:
            sys.exit(f"no llama-completion or llama-cli in {a.llama_bin}")
    for shape in a.shapes.split(","):
        with tempfile.TemporaryDirectory() as d:
            path = (a.files or Path(d)) / f"{shape}-{a.type}.gguf"
            if not path.exists():
                t = time.perf_counter()
                synthesize(shape, path, ftype=a.type, seed=0)
                print(f"{shape}: synthesized in {time.perf_counter() - t:.1f} s", flush=True)
            row = {"shape": shape, "type": a.type, "oxigpu": ours(path, a.backend, a.reps)}
            print(f"{shape}: oxigpu {row['oxigpu']}", flush=True)
            if binary is not None:
                n = int(statistics.median(row["oxigpu"]["json_schema"]["tokens"]))
                row["llama.cpp"] = llama_cpp(binary, path, n, a.reps)
                print(f"{shape}: llama.cpp {row['llama.cpp']}", flush=True)
        log.write(json.dumps(row) + "\n")
        log.flush()
        rows.append(row)
    lines = ["| model | engine | free t/s | JSON Schema t/s | constrained / free |", "|---|---|---:|---:|---:|"]
    for row in rows:
        for eng in ("oxigpu", "llama.cpp"):
            if eng in row:
                f, c = row[eng]["free"]["tokens_per_s"], row[eng]["json_schema"]["tokens_per_s"]
                lines.append(f"| {row['shape']} {row['type']} | {eng} | {f:,.1f} | {c:,.1f} | {c / f:.2f}x |")
        if "llama.cpp" in row:
            ratio = row["oxigpu"]["json_schema"]["tokens_per_s"] / row["llama.cpp"]["json_schema"]["tokens_per_s"]
            lines.append(f"| {row['shape']} {row['type']} | oxigpu / llama.cpp, constrained | | | {ratio:.2f}x |")
    table = "\n".join(lines)
    (a.out / "table.md").write_text(table + "\n")
    print(table)


if __name__ == "__main__":
    main()
