"""Do S sequences of C tokens of context fit the GPU at once? (issue 23: 64 x 4,096 on the 8B Q4_K_M.)

    python3 dev/fit_sequences.py -m FILE [--seqs 64] [--ctx 4096] [--gen C/4]

Loads FILE on wgpu with ``max_seqs=S, n_ctx=C`` and a KV budget of S x C tokens plus a block per
sequence (``kv_memory``, as llama.cpp's ``-c`` sizes its cache), prints the pool's size in tokens, then
submits S prompts of C - gen random tokens each and generates ``gen`` tokens for every one of them. It
checks that all S ran at once (the most sequences running together, sampled while they run) without
preemption, and prints the device memory in use (nvidia-smi where present).
"""
from __future__ import annotations

import argparse
import subprocess
import sys
import threading
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu import LLM  # noqa: E402
from oxigpu.gguf import GGUFFile  # noqa: E402
from oxigpu.models import HParams  # noqa: E402
from oxigpu.runtime.kvcache import KV_BLOCK, block_bytes, blocks_for  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--seqs", type=int, default=64)
    ap.add_argument("--ctx", type=int, default=4096)
    ap.add_argument("--gen", type=int, help="tokens generated per sequence (default C/4: long enough that the\
                    first sequences still run when the last prompts are admitted, one chunk a step)")
    a = ap.parse_args()
    a.gen = a.gen or a.ctx // 4
    hp = HParams.from_gguf(GGUFFile(a.model))
    # S x C tokens and a block of headroom per sequence (the resident loop takes blocks a few steps ahead)
    kv_memory = blocks_for(a.seqs * (a.ctx + KV_BLOCK)) * block_bytes(hp)
    t = time.perf_counter()
    llm = LLM(a.model, backend="wgpu", n_ctx=a.ctx, max_seqs=a.seqs, kv_memory=kv_memory)
    eng = llm.engine
    pool_tokens = eng.pool.n_blocks * KV_BLOCK
    print(f"kv_memory {kv_memory / 2**30:.1f} GiB; loaded in {time.perf_counter() - t:.1f} s; KV pool "
          f"{eng.pool.n_blocks} blocks = {pool_tokens:,} tokens (needed {a.seqs} x {a.ctx} = {a.seqs * a.ctx:,})",
          flush=True)
    rng = np.random.default_rng(0)
    vocab = eng.vocab_size
    prompts = [rng.integers(100, min(vocab, 30000), a.ctx - a.gen).tolist() for _ in range(a.seqs)]
    ban = {int(i): float("-inf") for i in llm.tokenizer.eog_ids}     # every sequence runs its gen tokens
    peak, running = [0], [True]

    def watch() -> None:
        while running[0]:
            peak[0] = max(peak[0], eng.scheduler.stats()["running"])
            time.sleep(0.01)
    watcher = threading.Thread(target=watch, daemon=True)
    watcher.start()
    t = time.perf_counter()
    out = llm.generate(prompts, temperature=0.0, max_tokens=a.gen, logit_bias=ban)
    secs = time.perf_counter() - t
    running[0] = False
    watcher.join()
    done = sum(len(r.token_ids) == a.gen for r in out)
    pre = eng.scheduler.preemptions
    print(f"{done}/{a.seqs} sequences generated {a.gen} tokens each after {a.ctx - a.gen} prompt tokens, "
          f"{secs:.1f} s, at most {peak[0]} running at once, preemptions {pre}", flush=True)
    try:
        print(subprocess.run(["nvidia-smi", "--query-gpu=name,memory.used,memory.total", "--format=csv"],
                             capture_output=True, text=True, timeout=20).stdout)
    except (OSError, subprocess.SubprocessError):
        pass
    ok = done == a.seqs and pre == 0 and pool_tokens >= a.seqs * a.ctx and peak[0] == a.seqs
    print("FITS" if ok else "DOES NOT FIT")
    sys.exit(0 if ok else 1)


if __name__ == "__main__":
    main()
