"""Does a speculative verification's row give the bits a one-row decode step gives? The logits of one-row
steps at positions P .. P + T - 1 against the rows of one T-row step over the same tokens (the target's
verification plan; steps of fewer rows than the plan's too), on random tokens after a prefill of P.
Greedy speculative output equals plain decoding only where they are equal
(test_one_row_step_equals_the_verification_rows checks the attention alone).

    python3 dev/verify_identity.py MODEL.gguf [T,T,..] [P]      # default 2,4,6,9 and 300
"""
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.base import Step  # noqa: E402
from oxigpu.graph.ir import KV_BLOCK  # noqa: E402
from oxigpu.runtime.engine import Engine  # noqa: E402

path = sys.argv[1]
ts = [int(t) for t in (sys.argv[2] if len(sys.argv) > 2 else "2,4,6,9").split(",")]
p0 = int(sys.argv[3]) if len(sys.argv) > 3 else 300
n_ctx = -(-(p0 + max(ts) + 1) // KV_BLOCK) * KV_BLOCK
eng = Engine(path, backend="wgpu", n_ctx=n_ctx, max_seqs=1)
toks = [int(t) for t in np.random.default_rng(0).integers(0, eng.vocab_size, p0 + max(ts))]
blocks = list(range(n_ctx // KV_BLOCK))
chunk = 256
for s in range(0, p0, chunk):                     # the prompt, in chunks the plans take
    n = min(chunk, p0 - s)
    eng.backend.run(eng.plan("all", n, 1), Step.single(toks[s:s + n], s, blocks))
dec = eng.plan("decode", eng.decode_bucket(1), eng.decode_bucket(1))
one = [eng.backend.run(dec, Step.single([toks[p0 + i]], p0 + i, blocks))["logits"][0].copy() for i in range(max(ts))]
for t in ts:                                      # plans of T rows, each running steps of n <= T rows
    plan = eng.plan("all", t, 1)
    for n in sorted({t, max(1, t // 2), 2} & set(range(1, t + 1)), reverse=True):
        ver = eng.backend.run(plan, Step.single(toks[p0:p0 + n], p0, blocks))["logits"]
        diffs = [float(np.abs(one[i] - ver[i]).max()) for i in range(n)]
        same = sum(np.array_equal(one[i], ver[i]) for i in range(n))
        print(f"plan T={t}, {n} rows: {same}/{n} equal, max |diff| per row " + " ".join(f"{d:.2g}" for d in diffs),
              flush=True)
