"""Where a decode batch's step goes on the GPU: each node of the decode plan of B sequences (each at
position POS, its own blocks), timed as its own timestamped pass after the whole step warmed the clock,
summed by kernel family; beside the whole step as one pass. The question behind issue 23's B = 16 rows.

    python3 dev/probe_batch_step.py MODEL.gguf B [POS]     # on the GPU machine
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.base import Step  # noqa: E402
from oxigpu.graph.ir import KV_BLOCK  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402
from oxigpu.tools.bench import _table, node_times  # noqa: E402

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
per, whole, source = node_times(be.dev, be.node_dispatches(plan))
prof = _table(be.node_dispatches(plan), per, plan, source)
print(f"{Path(path).name} B={B} pos={pos}: whole step {whole * 1e6:.0f} us as one pass, "
      f"nodes apart {prof['step_s'] * 1e6:.0f} us ({source})")
for row in prof["rows"]:
    print(f"  {row['family']:28s} {row['dispatches']:4d} dispatches {row['seconds'] * 1e6:8.1f} us "
          f"{row['percent']:5.1f} %")
