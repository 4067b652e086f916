"""Each dispatch of one prefill chunk, timed as its own pass on the GPU clock (after the chunk warmed it):
which of a node's dispatches (x pass, GEMM, split-k reduction) its time goes to. The question behind the
1B F16 prefill's q/k/v node, 76 TFLOP/s in the model against ~124 for the same GEMM alone.

    python3 dev/probe_prefill_dispatch.py MODEL.gguf [N_TOKENS] [OP,...]     # on the GPU machine
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.runtime.engine import Engine  # noqa: E402
from oxigpu.tools.bench import node_times  # noqa: E402

path = sys.argv[1]
n = int(sys.argv[2]) if len(sys.argv) > 2 else 512
ops = sys.argv[3].split(",") if len(sys.argv) > 3 else ["matmul", "matmul_add", "matmul_multi", "matmul_glu"]
eng = Engine(path, backend="wgpu", n_ctx=max(1024, 2 * n))
rng = np.random.default_rng(0)
chunk = [int(t) for t in rng.integers(0, eng.vocab_size, n)]
plan = eng.prefill_plan
eng.forget()
eng.eval(chunk)
be = eng.backend.resident
step = be.node_dispatches(plan)
groups = [(node, [d]) for node, ds in step for d in ds]
per, whole, source = node_times(be.dev, groups)
rows: dict[tuple, list[float]] = {}
for (node, (d,)), s in zip(groups, per):
    if node is None or node.op not in ops:
        continue
    shapes = " ".join("x".join(map(str, v.shape)) for v in node.inputs[:3])
    key = (node.op, shapes, d.pipeline.label, d.workgroups)
    rows.setdefault(key, []).append(s)
print(f"{path}: {n}-token chunk, plan rows {plan.T}, whole chunk {whole * 1e3:.3f} ms ({source})")
print("| op | input shapes | pipeline | grid | count | us each (median) |")
for (op, shapes, label, grid), ss in rows.items():
    print(f"| {op} | {shapes} | {label} | {grid} | {len(ss)} | {np.median(ss) * 1e6:.1f} |")
