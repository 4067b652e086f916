"""Each distinct node of a model's prefill (or decode) plan timed three ways, and each of its dispatches:
where a node's time in the model differs from its kernel's time in a microbenchmark.

    python3 dev/bench_nodes.py -m MODEL [--tokens 512] [--decode] [--out DIR]

The model is loaded on wgpu and one chunk of ``--tokens`` random tokens is evaluated (``--decode``: one
decode step after it), which leaves every node's inputs on the device. Then for the first node of each
(op, input shapes) of the plan, after 0.3 s of the whole chunk (the H100 drops its clock within a fraction
of a second of idle):
- ``alone``: the node's dispatches as their own compute pass, many such passes in one submit (as
  ``oxigpu bench --profile`` times a node; each pass pays its start and drain);
- ``copies``: N copies of the node in one pass (as dev/bench_gemm.py and bench_gemv.py time a kernel;
  the next copy's start overlaps nothing, but pass overheads are shared);
- per dispatch: each of the node's dispatches ``alone``.
GPU timestamps; medians. Results also go to ``nodes.jsonl`` under ``--out``.
"""
from __future__ import annotations

import argparse
import json
import os
import statistics
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.runtime.engine import Engine  # noqa: E402

WARM_S = 0.3


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("-m", "--model", required=True)
    ap.add_argument("--tokens", type=int, default=512)
    ap.add_argument("--decode", action="store_true", help="the decode plan (one step after the chunk)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    args = ap.parse_args()
    engine = Engine(Path(args.model), backend="wgpu", n_ctx=args.tokens + 2)
    be = engine.backend
    dev = be.dev
    if not dev.has_timestamps:
        sys.exit("bench_nodes.py needs the timestamp-query feature")
    ids = np.random.default_rng(0).integers(0, engine.vocab_size, args.tokens + 1).tolist()
    engine.eval(ids[:args.tokens])
    plan = engine._prefill
    if args.decode:
        engine.eval(ids[:args.tokens + 1])
        plan = engine._decode
    loaded = be._plans[id(plan)]
    flat = loaded.dispatches

    def warm() -> None:
        t_end = time.perf_counter() + WARM_S
        while time.perf_counter() < t_end:
            dev.submit(flat)
            dev.sync()

    def alone(ds: list) -> float:
        once = dev.time_passes([ds])[0]
        passes = int(min(200, max(5, 0.02 / max(once, 1e-7))))
        return statistics.median(dev.time_passes([ds] * passes))

    def copies(ds: list) -> tuple[float, int]:
        once = dev.time_passes([ds])[0]
        n = int(min(50, max(2, 0.02 / max(once, 1e-7))))
        return statistics.median(dev.time_passes([ds * n] * 3)) / n, n

    warm()
    whole = statistics.median(dev.time_passes([flat])[0] for _ in range(3))
    print(f"{Path(args.model).name}: {'decode step' if args.decode else f'{args.tokens}-token chunk'} "
          f"as one pass {whole * 1e6:,.1f} us GPU, {len(plan.nodes)} nodes, {len(flat)} dispatches\n")
    print(f"{'op':16} {'input shapes':40} {'count':>5} {'alone us':>9} {'copies us':>10}  dispatches alone (us)")
    seen: dict[tuple, dict] = {}
    for node, ds in zip(plan.nodes, loaded.node_dispatches):
        key = (node.op, " ".join("x".join(map(str, v.shape)) for v in node.inputs[:3]))
        if key in seen:
            seen[key]["count"] += 1
            continue
        if not ds:
            continue
        warm()
        a = alone(ds)
        c, n = copies(ds)
        per = [alone([d]) for d in ds] if len(ds) > 1 else [a]
        rec = dict(op=key[0], shapes=key[1], count=1, alone_us=a * 1e6, copies_us=c * 1e6, n_copies=n,
                   dispatch_us=[p * 1e6 for p in per], workgroups=[list(d.workgroups) for d in ds])
        seen[key] = rec
    with open(Path(args.out) / "nodes.jsonl", "w") as f:
        for rec in seen.values():
            f.write(json.dumps(rec) + "\n")
            print(f"{rec['op']:16} {rec['shapes']:40} {rec['count']:5} {rec['alone_us']:9.1f} "
                  f"{rec['copies_us']:10.1f}  "
                  + " ".join(f"{p:.1f}{tuple(w)}" for p, w in zip(rec["dispatch_us"], rec["workgroups"])))
    total = sum(r["count"] * r["alone_us"] for r in seen.values())
    copies = sum(r["count"] * r["copies_us"] for r in seen.values())
    print(f"\nsum of nodes alone {total:,.1f} us; of copies {copies:,.1f}")


if __name__ == "__main__":
    main()
