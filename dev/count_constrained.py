"""Device round trips per generated token of a JSON-Schema generation (dev/bench_constrained.py's schema)
on a tiny synthetic model, from the device layer's counters (``Device.counts``: submits, writes, reads).

    PYTHONPATH=$PWD python3 dev/count_constrained.py [--shape tiny-qwen2] [--backend wgpu] [--tokens 200]
    PYTHONPATH=$PWD python3 dev/count_constrained.py --join 8     # host steps of joining requests instead

Runs on any adapter (lavapipe included: the counts do not depend on speed). Also times the constraint's own
host work per token (llguidance's mask and commit) and counts the scheduler's steps: host-stepped ones,
resident ones and forced tokens. ``--join N``: N requests arriving one by one while the others decode; the
bytes the host steps read back (logits, or ids only) and their device calls.
"""
from __future__ import annotations

import argparse
import math
import sys
import tempfile
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))
sys.path.insert(0, str(Path(__file__).resolve().parent))

from bench_constrained import SCHEMA  # noqa: E402

from oxigpu import LLM  # noqa: E402
from oxigpu.runtime import constraints  # noqa: E402
from oxigpu.synth import synthesize  # noqa: E402


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--shape", default="tiny-qwen2")
    ap.add_argument("--backend", default="wgpu")
    ap.add_argument("--tokens", type=int, default=200)
    ap.add_argument("--seeds", default="1,2,3")
    ap.add_argument("--model", help="a GGUF file instead of a synthetic shape")
    ap.add_argument("--join", type=int, default=0, help="N requests joining while the others decode")
    a = ap.parse_args()
    path = a.model or synthesize(a.shape, Path(tempfile.mkdtemp()) / f"{a.shape}.gguf", seed=7, workers=1).path
    if a.join:
        return joins(path, a)
    llm = LLM(path, backend=a.backend, n_ctx=1024)
    eng, sched = llm.engine, llm.engine.scheduler
    ban = {t: -math.inf for t in llm.tokenizer.eog_ids}
    host = {"mask": [0.0, 0], "consume": [0.0, 0], "forced": [0.0, 0]}
    cls = constraints.ConstraintState
    orig = {k: getattr(cls, k) for k in host}

    def timed(name):
        def f(self, *args):
            t0 = time.perf_counter()
            try:
                return orig[name](self, *args)
            finally:
                host[name][0] += time.perf_counter() - t0
                host[name][1] += 1
        return f
    for k in host:
        setattr(cls, k, timed(k))
    dev = getattr(eng.backend, "dev", None)
    host_steps = [0]
    run = sched._run

    def counted(batch):
        host_steps[0] += 1
        return run(batch)
    sched._run = counted
    print(f"{a.shape if not a.model else a.model} on {a.backend}, vocab {eng.vocab_size}")
    for mode in ("json_schema", "free"):
        tot = {"tokens": 0, "submit": 0, "write": 0, "read": 0, "steps": 0, "resident": 0, "s": 0.0}
        host_steps[0] = 0
        for seed in map(int, a.seeds.split(",")):
            kw = dict(max_tokens=a.tokens, temperature=0.8, seed=seed)
            kw.update(json_schema=SCHEMA) if mode == "json_schema" else kw.update(logit_bias=ban)
            before = dict(dev.counts) if dev is not None else {}
            steps, res = sched.steps, sched.resident_steps
            t0 = time.perf_counter()
            r = llm.generate(PROMPT, **kw)
            tot["s"] += time.perf_counter() - t0
            tot["tokens"] += len(r.token_ids)
            for k in ("submit", "write", "read"):
                tot[k] += (dev.counts.get(k, 0) - before.get(k, 0)) if dev is not None else 0
            tot["steps"] += sched.steps - steps
            tot["resident"] += sched.resident_steps - res
        n = tot["tokens"]
        print(f"{mode:12s} tokens {n:5d}  per token: submits {tot['submit'] / n:.2f} writes {tot['write'] / n:.2f} "
              f"reads {tot['read'] / n:.2f}  scheduler steps {tot['steps'] / n:.2f}, host steps {host_steps[0]} "
              f"(resident steps {tot['resident']}/{n})  {n / tot['s']:.1f} tok/s ({a.backend}, not a GPU figure)")
    for k, (s, c) in host.items():
        if c:
            print(f"constraint {k:8s}: {c:5d} calls, {1e6 * s / c:8.1f} us each")


def joins(path, a) -> None:
    """``a.join`` requests, each submitted after the previous one drew its first tokens: the host steps
    (prompts beside decoding sequences) with the bytes they read back."""
    llm = LLM(path, backend=a.backend, n_ctx=256, max_seqs=a.join)
    eng, sched = llm.engine, llm.engine.scheduler
    dev = eng.backend.dev
    got = {"bytes": 0}
    read, read_submitted = dev.read, dev.read_submitted

    def r(buffer, dtype=np.float32, shape=None, offset=0):
        out = read(buffer, dtype, shape, offset)
        got["bytes"] += out.nbytes
        return out

    def rs(buffer, nbytes, index):
        got["bytes"] += nbytes
        return read_submitted(buffer, nbytes, index)
    dev.read, dev.read_submitted = r, rs
    host = {"steps": 0, "bytes": 0, "submit": 0, "write": 0, "read": 0}
    run = sched._run

    def counted(batch):
        b0, c0 = got["bytes"], dict(dev.counts)
        run(batch)
        host["steps"] += 1
        host["bytes"] += got["bytes"] - b0
        for k in ("submit", "write", "read"):
            host[k] += dev.counts[k] - c0.get(k, 0)
    sched._run = counted
    gens = []
    for i in range(a.join):
        gens.append(llm.stream(PROMPT, max_tokens=24, temperature=0.8, seed=i, repeat_penalty=1.1))
        it = iter(gens[-1])
        next(it, None)
    for g in gens:
        list(g)
    n = host["steps"]
    print(f"{a.join} joining requests, vocab {eng.vocab_size}: {n} host steps, per host step {host['bytes'] / n:,.0f} "
          f"bytes read back, submits {host['submit'] / n:.2f} writes {host['write'] / n:.2f} "
          f"reads {host['read'] / n:.2f}")


PROMPT = "Write the inventory as JSON."

if __name__ == "__main__":
    main()
