"""Where a decode batch's step goes on the GPU: each node of the decode plan of B sequences (each at
position POS, its own blocks), timed as its own timestamped pass after the whole step warmed the clock,
summed by kernel family; beside the whole step as one pass. The question behind issue 23's B = 16 rows.

    python3 dev/probe_batch_step.py MODEL.gguf B [POS]     # on the GPU machine
"""
import statistics
import sys
import time
from collections import defaultdict
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.base import Step  # noqa: E402
from oxigpu.graph.ir import KV_BLOCK  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402
from oxigpu.tools.bench import _family  # noqa: E402

path, B = sys.argv[1], int(sys.argv[2])
pos = int(sys.argv[3]) if len(sys.argv) > 3 else 576
n_ctx = -(-(pos + 64) // KV_BLOCK) * KV_BLOCK
eng = Engine(path, backend="wgpu", n_ctx=n_ctx, max_seqs=B)
nb = n_ctx // KV_BLOCK
rng = np.random.default_rng(0)
step = Step.batch([([int(rng.integers(0, eng.vocab_size))], pos, list(range(i * nb, (i + 1) * nb))) for i in range(B)])
eng.forward(step, True)                       # leaves the step's inputs and params on the device
plan = eng.plan("decode", eng.decode_bucket(B), eng.decode_bucket(B))
be = eng.backend
dev = be.dev
groups = be.node_dispatches(plan)
flat = [d for _, ds in groups for d in ds]
t_end = time.perf_counter() + 0.5
while time.perf_counter() < t_end:
    dev.submit(flat * 4)
    dev.sync()
per = np.median([dev.time_passes([ds for _, ds in groups]) for _ in range(5)], axis=0)
whole = statistics.median(dev.time_passes([flat])[0] for _ in range(5))
fam: dict[str, list[float]] = defaultdict(lambda: [0.0, 0])
for (node, _), t in zip(groups, per):
    f = fam[_family(node, plan)]
    f[0] += t
    f[1] += 1
print(f"{Path(path).name} B={B} pos={pos}: whole step {whole * 1e6:.0f} us as one pass, "
      f"nodes apart {per.sum() * 1e6:.0f} us")
for name, (t, n) in sorted(fam.items(), key=lambda kv: -kv[1][0]):
    print(f"  {name:28s} {n:4d} nodes {t * 1e6:8.1f} us {100 * t / per.sum():5.1f} %")
