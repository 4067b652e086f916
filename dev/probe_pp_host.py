"""Where a prefill chunk's wall time goes on the host: run_bench's pp (the exact sequence `oxigpu bench` runs),
each NP-token eval split into phases: before the first submit, the submits (encoding the rest of the
chunk's pieces), waiting in the logits read, after it. Runs on the ce6912e tree too (old bench module), so
both trees are compared in one call (docs/perf-log.md, "single-stream prefill of a small model").

    PYTHONPATH=<tree> python3 dev/probe_pp_host.py MODEL.gguf REPS [noresident]

``noresident``: skip building the GPU-resident decode step before the pp runs."""
import os
import statistics as st
import sys
import time

NP = int(os.environ.get("NP", 512))
try:
    from oxigpu.tools import bench as B
except ImportError:                    # the ce6912e tree
    from oxigpu.runtime import bench as B

F, reps = sys.argv[1], int(sys.argv[2])
nores = len(sys.argv) > 3
recs = []
RealEngine = B.Engine


def factory(*a, **k):
    """The engine run_bench builds, its evals timed by phase."""
    e = RealEngine(*a, **k)
    dev, q = e.backend.dev, e.backend.dev.queue
    marks: dict = {}
    real_submit, real_read, real_eval = q.submit, dev.read, e.eval

    def submit(cbs):
        if "read0" in marks:           # the read's own copy
            return real_submit(cbs)
        marks.setdefault("first", time.perf_counter())
        real_submit(cbs)
        marks["last"] = time.perf_counter()

    def read(*a, **k):
        marks["read0"] = time.perf_counter()
        r = real_read(*a, **k)
        marks["read1"] = time.perf_counter()
        return r

    def ev(tokens):
        marks.clear()
        t0 = time.perf_counter()
        r = real_eval(tokens)
        t1 = time.perf_counter()
        if len(tokens) == NP:
            recs.append((t1 - t0, marks["first"] - t0, marks["last"] - marks["first"], marks["read0"] - marks["last"],
                         marks["read1"] - marks["read0"], t1 - marks["read1"]))
        return r

    q.submit, dev.read, e.eval = submit, read, ev
    return e


B.Engine = factory
if nores:
    B._step_groups = lambda engine, *a, **k: [(n, [n]) for n in engine.decode_plan.nodes]
r = B.run_bench(F, n_prompt=NP, n_gen=0, reps=reps, backend="wgpu")
rows = recs[-reps:]
med = [st.median(c) * 1e3 for c in zip(*rows)]
walls = [x[0] * 1e3 for x in rows]
print(f"{'noresident ' if nores else ''}pp {r['pp']['tokens_per_s']:,.0f} t/s; ms per eval (median of {len(rows)}): "
      f"wall {med[0]:.3f} (min {min(walls):.3f} max {max(walls):.3f}) | pre {med[1]:.3f} | submits {med[2]:.3f} "
      f"| gap {med[3]:.3f} | read {med[4]:.3f} | after {med[5]:.3f}")
print("walls", " ".join(f"{w:.2f}" for w in walls))
