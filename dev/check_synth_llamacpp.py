#!/usr/bin/env python3
"""Check that llama.cpp loads every synthetic shape and computes finite, non-degenerate logits.

For each (shape, type) this writes the file with oxigpu.synth, loads it with llama-cpp-python
(`Llama(path, n_ctx=64)`), evaluates a short prompt and prints one table row. Tiny shapes run with several
types; the real shapes run with their first 2 layers unless --full, except the ones named by --full-shape
(default: gemma3-270m and qwen2.5-0.5b at full size). Needs `llama_cpp` (see MODELS.md for the build).

    python dev/check_synth_llamacpp.py [--full] [--keep DIR]   # oxigpu installed, or PYTHONPATH=.
"""
from __future__ import annotations

import argparse
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

from oxigpu.synth import SHAPES, synthesize

PROMPT = b"The quick brown fox jumps over the lazy dog. 12345"
TINY_TYPES = ["Q4_K_M", "Q8_0", "Q4_0", "Q6_K", "F16"]
REAL_TYPES = ["Q4_K_M", "Q8_0"]


def check(path: Path) -> dict:
    """Load `path` in llama.cpp, evaluate PROMPT, summarize the logits of every position."""
    from llama_cpp import Llama

    t0 = time.perf_counter()
    model = Llama(model_path=str(path), n_ctx=64, n_threads=2, logits_all=True, verbose=False)
    try:
        toks = model.tokenize(PROMPT, add_bos=True)
        model.eval(toks)
        logits = np.array(model.scores[:model.n_tokens], dtype=np.float32)
    finally:
        model.close()
    top = np.sort(logits[-1])[-2:]
    return {"n_tok": len(toks), "finite": bool(np.isfinite(logits).all()), "std": float(logits.std(axis=1).mean()),
            "top1": int(logits[-1].argmax()), "gap": float(top[1] - top[0]),
            "distinct_top1": len(set(logits.argmax(axis=1).tolist())), "seconds": time.perf_counter() - t0}


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--full", action="store_true", help="all real shapes at full size (8B included)")
    ap.add_argument("--full-shape", action="append", default=None,
                    help="real shape to run at full size (repeatable; default gemma3-270m, qwen2.5-0.5b)")
    ap.add_argument("--keep", type=Path, help="write the files here and keep them")
    args = ap.parse_args()
    full = set(args.full_shape or ["gemma3-270m", "qwen2.5-0.5b"])
    runs = []
    for name in SHAPES:
        tiny = name.startswith("tiny-")
        for t in TINY_TYPES if tiny else REAL_TYPES:
            layers = None if tiny or args.full or (name in full and t == "Q4_K_M") else 2
            runs.append((name, t, layers))

    with tempfile.TemporaryDirectory(prefix="oxigpu-synth-check-") as tmp:
        out_dir = args.keep or Path(tmp)
        out_dir.mkdir(parents=True, exist_ok=True)
        return run_all(runs, out_dir, keep=args.keep is not None)


def run_all(runs: list[tuple[str, str, int | None]], out_dir: Path, keep: bool) -> int:
    """Write, load and evaluate each (shape, type, layers); print the table; 1 if any failed."""
    header = (f"{'shape':<14} {'type':<7} {'layers':>6} {'MiB':>8} {'write s':>8} {'llama s':>8} {'tok':>4} "
              f"{'finite':>6} {'logit std':>9} {'top1':>7} {'gap':>6} {'uniq':>4}  result")
    print(header)
    print("-" * len(header))
    failures = 0
    for name, t, layers in runs:
        path = out_dir / f"{name}-{t}{'' if layers is None else f'-L{layers}'}.gguf"
        r = synthesize(name, path, t, seed=0, layers=layers)
        try:
            c = check(path)
            ok = c["finite"] and c["std"] > 0.05 and c["distinct_top1"] > 1
            row = (f"{c['n_tok']:>4} {str(c['finite']):>6} {c['std']:>9.3f} {c['top1']:>7} {c['gap']:>6.3f} "
                   f"{c['distinct_top1']:>4}  {'ok' if ok else 'BAD'}")
            llama_s = c["seconds"]
        except Exception as e:  # report every shape, not just the first failure
            ok, row, llama_s = False, f"FAILED: {type(e).__name__}: {e}", float("nan")
        failures += not ok
        print(f"{name:<14} {t:<7} {r.shape.n_layer:>6} {r.file_bytes / 2**20:>8.1f} {r.seconds:>8.2f} "
              f"{llama_s:>8.2f} {row}", flush=True)
        if not keep:
            path.unlink()
    print(f"\n{len(runs) - failures}/{len(runs)} ok")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
