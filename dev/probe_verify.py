"""Where a speculative round's time goes on the GPU: the verification step (the "all" plan of k + 1 rows of
one sequence) against a plain decode step, on the GPU clock (each node its own timestamped pass, summed by
kernel family) and on the host's (a synced call, as a round makes it), beside the GPU-resident decode
loop's time per token. The question behind issue 27's speculative speed (a round cost ~3 plain steps).

    python3 dev/probe_verify.py MODEL.gguf [K,K,...] [POS]      # on the GPU machine
"""
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.base import Step  # noqa: E402
from oxigpu.runtime import sampling  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402
from oxigpu.tools.bench import _table, node_times  # noqa: E402

path = sys.argv[1]
KS = [int(k) for k in sys.argv[2].split(",")] if len(sys.argv) > 2 else [5]
pos = int(sys.argv[3]) if len(sys.argv) > 3 else 300
eng = Engine(path, backend="wgpu", n_ctx=1024, max_seqs=1)
be, dev = eng.backend, eng.backend.dev
rng = np.random.default_rng(0)
prompt = [int(x) for x in rng.integers(0, eng.vocab_size, pos)]
blocks = list(range(eng.n_ctx // 32))
start = 0
while start < pos:                      # the cache holds the prompt
    n = min(eng.prefill_chunk, pos - start)
    eng.forward(Step.single(prompt[start:start + n], start, blocks), False)
    start += n


def wall(fn, reps=30):
    fn()
    ts = []
    for _ in range(reps):
        t0 = time.perf_counter()
        fn()
        ts.append(time.perf_counter() - t0)
    return statistics.median(ts)


def host_split(fn, reps=30):
    """Where a synced call's host time goes: the device methods it calls, timed around each call (the read
    includes the wait for the GPU), and what is left (Python around them)."""
    names = ("write", "write_params", "encode", "submit", "submit_prepared", "submit_indexed", "prepare",
             "read_submitted", "read")
    spent = defaultdict(float)
    orig = {n: getattr(dev, n) for n in names}

    def timed(n, f):
        def call(*a, **kw):
            t0 = time.perf_counter()
            try:
                return f(*a, **kw)
            finally:
                spent[n] += time.perf_counter() - t0
        return call
    fn()
    for n, f in orig.items():
        setattr(dev, n, timed(n, f))
    try:
        t0 = time.perf_counter()
        for _ in range(reps):
            fn()
        total = (time.perf_counter() - t0) / reps
    finally:
        for n, f in orig.items():
            setattr(dev, n, f)
    # nested calls (submit inside encode's callers) are counted where they run; encode inside submit twice
    parts = ", ".join(f"{n} {spent[n] / reps * 1e3:.3f}" for n in names if spent[n])
    return f"{total * 1e3:.3f} ms a call: {parts} ms (nested calls counted in each)"


def gpu_nodes(plan, step, label):
    be.run(plan, step)                  # leaves the step's inputs and params on the device
    groups = be.node_dispatches(plan)
    per, whole, source = node_times(dev, groups)
    prof = _table(groups, per, plan, source)
    print(f"{label}: {sum(len(ds) for _, ds in groups)} dispatches, GPU {whole * 1e6:.0f} us as one pass, "
          f"nodes apart {prof['step_s'] * 1e6:.0f} us ({source})")
    for row in prof["rows"][:8]:
        print(f"    {row['family']:28s} {row['dispatches']:4d} dispatches {row['seconds'] * 1e6:8.1f} us")
    return whole


tok = prompt[-1]
dplan = eng.decode_plan
one = Step.single([tok], pos, blocks)
g1 = gpu_nodes(dplan, one, f"decode step (1 row) at {pos}")
res = be.resident
cfg = sampling.SamplerConfig()
ctx = prompt + [tok]
slots1 = sampling.pack_batch([cfg], [len(ctx)], [0], vocab=eng.vocab_size)
w_host1 = wall(lambda: eng.forward(one, True))
w_samp1 = wall(lambda: res.run_sampled(dplan, one, slots1, [ctx]))


def resident_run(n=64):
    stream = res.decode_batch(dplan, [ctx], slots1, n, [blocks])
    try:
        for _ in stream:
            pass
    finally:
        stream.close()


w_res = wall(resident_run, reps=5) / 64
split1 = host_split(lambda: res.run_sampled(dplan, one, slots1, [ctx]))
print(f"1 row, synced with the GPU sampler, host split: {split1}")
print(f"1 row: GPU {g1 * 1e3:.3f} ms; host, synced: with logits {w_host1 * 1e3:.3f} ms, with the GPU sampler "
      f"{w_samp1 * 1e3:.3f} ms; GPU-resident loop {w_res * 1e3:.3f} ms a token")
def verify_case(K: int) -> None:
    vplan = eng.plan("all", K + 1, 1)
    rows = Step.single([tok] + prompt[:K], pos, blocks)
    gv = gpu_nodes(vplan, rows, f"verification ({K + 1} rows) at {pos}")
    S = vplan.outputs["logits"].shape[0]
    contexts = [ctx + prompt[:i] for i in range(K + 1)] + [None] * (S - K - 1)
    slotsv = sampling.pack_batch([cfg] * S, [len(c) if c else 1 for c in contexts], list(range(S)),
                                 vocab=eng.vocab_size)
    w_logv = wall(lambda: be.run(vplan, rows))
    w_sampv = wall(lambda: res.run_sampled(vplan, rows, slotsv, contexts))
    w_encv = wall(lambda: dev.prepare([d for _, ds in be.node_dispatches(vplan) for d in ds]))
    print(f"{K + 1} rows, synced with the GPU sampler, host split: "
          f"{host_split(lambda: res.run_sampled(vplan, rows, slotsv, contexts))}")
    print(f"{K + 1} rows: GPU {gv * 1e3:.3f} ms ({gv / g1:.2f} x 1 row); host, synced: with logits "
          f"{w_logv * 1e3:.3f} ms, with the GPU sampler {w_sampv * 1e3:.3f} ms ({w_sampv / w_res:.2f} x a "
          f"resident token); encoding its dispatches {w_encv * 1e3:.3f} ms")


for K in KS:
    verify_case(K)
