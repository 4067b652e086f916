"""Do S sequences of C tokens of context fit the GPU at once? (issue 23: 64 x 4,096 on the 8B Q4_K_M.)

    python3 dev/fit_sequences.py -m FILE [--seqs 64] [--ctx 4096] [--gen 8]

Loads FILE on wgpu with ``max_seqs=S, n_ctx=C`` (the default KV budget), prints the pool's size in tokens,
then submits S prompts of C - gen random tokens each and generates ``gen`` tokens for every one of them:
all S run at once when the pool holds S x C tokens (no preemption), which the script checks and prints with
the device memory in use (nvidia-smi where present).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu import LLM  # noqa: E402
from oxigpu.runtime.kvcache import KV_BLOCK  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--gen", type=int, default=8)
    a = ap.parse_args()
    t = time.perf_counter()
    llm = LLM(a.model, backend="wgpu", n_ctx=a.ctx, max_seqs=a.seqs)
    eng = llm.engine
    pool_tokens = eng.pool.n_blocks * KV_BLOCK
    print(f"loaded in {time.perf_counter() - t:.1f} s; KV pool {eng.pool.n_blocks} blocks = {pool_tokens:,} tokens "
          f"(needed {a.seqs} x {a.ctx} = {a.seqs * a.ctx:,})", flush=True)
    rng = np.random.default_rng(0)
    vocab = eng.vocab_size
    prompts = [rng.integers(100, min(vocab, 30000), a.ctx - a.gen).tolist() for _ in range(a.seqs)]
    t = time.perf_counter()
    ban = {int(t): float("-inf") for t in llm.tokenizer.eog_ids}     # every sequence runs its gen tokens
    out = llm.generate(prompts, temperature=0.0, max_tokens=a.gen, logit_bias=ban)
    secs = time.perf_counter() - t
    done = sum(len(r.token_ids) == a.gen for r in out)
    pre = eng.scheduler.preemptions
    print(f"{done}/{a.seqs} sequences generated {a.gen} tokens each after {a.ctx - a.gen} prompt tokens, "
          f"{secs:.1f} s, preemptions {pre}", flush=True)
    try:
        print(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv"],
                             capture_output=True, text=True, timeout=20).stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    ok = done == a.seqs and pre == 0 and pool_tokens >= a.seqs * a.ctx
    print("FITS" if ok else "DOES NOT FIT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
