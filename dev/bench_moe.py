"""Mixture-of-experts node benchmark: one MoE FFN's expert products (matmul_id gate, up, down), routing
(moe_gate; in decode also moe_route: norm, router and gate) and mixing (moe_sum) at a given shape, for
decode (T = 1) and a prefill chunk.

    python3 dev/bench_moe.py [--experts 128] [--used 8] [--hidden 2048] [--ff 768] [--types Q4_K,Q4_K,Q6_K]
                             [--tokens 1,512] [--reps 5] [--json OUT]

Per node: dispatches, workgroups, the weight bytes the chosen experts hold (each read once is the floor),
and seconds per run (Device.time: wall time of repeated copies in one submit; on lavapipe the figures
are only relative). Weights are random bytes (their values do not change the work); routing ids are
drawn per token without repeats, as a router's top-k. Runs against whichever oxigpu is on PYTHONPATH,
so two trees compare on one machine (``PYTHONPATH=<tree> python3 dev/bench_moe.py``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

if not os.environ.get("PYTHONPATH"):    # else the tree on PYTHONPATH (comparing two trees)
    sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.wgpu.device import Device  # noqa: E402
from oxigpu.backends.wgpu.kernel import prepare  # noqa: E402
from oxigpu.graph.ir import OPS  # noqa: E402
from oxigpu.quant import get_type  # noqa: E402


def _raw(qtype: str, rows: int, k: int, g: np.random.Generator) -> np.ndarray:
    qt = get_type(qtype)
    raw = g.integers(0, 256, (rows, qt.row_bytes(k)), dtype=np.uint8)
    if qt.name not in ("F32", "F16", "BF16"):      # tame f16 scales: finite values, no NaN handling paths
        raw.view(np.uint8)[:, 1::2] &= 0x3B
    return raw


def _node(dev: Device, op: str, inputs, types, attrs, n_tokens: int, reps: int) -> dict:
    from oxigpu.backends.wgpu.device import Params
    p = prepare(op, inputs, attrs, types, dev)
    dev.write_params(Params(pos=0, n_tokens=n_tokens, n_seqs=1))
    wgs = sum(int(np.prod(d.workgroups)) for d in p.dispatches)
    secs = dev.time(p.dispatches, repeat=reps)
    return {"dispatches": len(p.dispatches), "workgroups": wgs, "seconds": secs}


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    ap.add_argument("--experts", type=int, default=128)
    ap.add_argument("--used", type=int, default=8)
    ap.add_argument("--hidden", type=int, default=2048)
    ap.add_argument("--ff", type=int, default=768)
    ap.add_argument("--types", default="Q4_K,Q4_K,Q6_K", help="gate, up, down weight types")
    ap.add_argument("--tokens", default="1,512")
    ap.add_argument("--reps", type=int, default=5)
    ap.add_argument("--json", type=Path)
    a = ap.parse_args()
    dev = Device()
    g = np.random.default_rng(0)
    E, K, d, f = a.experts, a.used, a.hidden, a.ff
    tg, tu, td = a.types.split(",")
    ws = {"gate": (_raw(tg, E * f, d, g).reshape(E, f, -1), tg), "up": (_raw(tu, E * f, d, g).reshape(E, f, -1), tu),
          "down": (_raw(td, E * d, f, g).reshape(E, d, -1), td)}
    out = []
    print(f"device: {dev.adapter.info['device']}")
    print("T     node                   dispatches  workgroups  chosen-weight MB  ms")
    for T in (int(t) for t in a.tokens.split(",")):
        ids = np.stack([g.choice(E, K, replace=False) for _ in range(T)]).astype(np.int32)
        chosen = len(np.unique(ids))
        logits = g.standard_normal((T, E)).astype(np.float32)
        x = g.standard_normal((T, d)).astype(np.float32)
        h = g.standard_normal((T, K * f)).astype(np.float32)
        y = g.standard_normal((T, K * d)).astype(np.float32)
        w = g.random((T, K)).astype(np.float32)
        nodes = [("moe_gate", [logits], ["f32"], {"k": K, "norm": True, "w_scale": 1.0}, 0),
                 ("matmul_id gate", [x, ws["gate"][0], ids], ["f32", tg, "i32"], {}, ws["gate"][0]),
                 ("matmul_id up", [x, ws["up"][0], ids], ["f32", tu, "i32"], {}, ws["up"][0]),
                 ("matmul_id down", [h, ws["down"][0], ids], ["f32", td, "i32"], {}, ws["down"][0]),
                 ("moe_sum", [y, w], ["f32", "f32"], {}, 0)]
        if T <= 64 and dev.int8_dots:   # A/B of the down GEMV's split: x staged per workgroup instead of a
            # dispatch (xs), more rows per group and per workgroup (fewer workgroups of more weight bytes)
            for tag, over in (("xs", {"xq": False, "xs": True}), ("r4", {"r": 4}), ("r4g8", {"r": 4, "gpw": 8}),
                              ("r4g8xs", {"r": 4, "gpw": 8, "xq": False, "xs": True})):
                nodes.insert(4, (f"matmul_id down {tag}", [h, ws["down"][0], ids], ["f32", td, "i32"],
                                 {"gemv": {"q8x": True, "tpr": 32, **over}}, ws["down"][0]))
        if T <= 64 and "moe_route" in OPS:   # decode: the FFN's norm + F32 router + gate in one dispatch
            router = g.standard_normal((E, d)).astype(np.float32).view(np.uint8)
            nw = np.ones(d, np.float32)
            nodes.insert(0, ("moe_route", [x, router, nw], ["f32", "F32", "f32"],
                             {"eps": 1e-6, "k": K, "norm": True, "w_scale": 1.0}, 0))
        for name, ins, types, attrs, wt in nodes:
            try:
                r = _node(dev, name.split()[0], ins, types, attrs, T, a.reps)
            except Exception as e:      # a variant this tree or device does not take: say so, go on
                print(f"{T:<5} {name:<22} skipped: {str(e).splitlines()[0][:90]}", flush=True)
                continue
            mb = 0.0 if isinstance(wt, int) else chosen * wt[0].nbytes / 1e6
            r.update(tokens=T, node=name, chosen_mb=mb)
            out.append(r)
            print(f"{T:<5} {name:<22} {r['dispatches']:>10}  {r['workgroups']:>10}  {mb:>16.1f}  "
                  f"{r['seconds'] * 1e3:.3f}", flush=True)
    if a.json:
        a.json.write_text(json.dumps(out, indent=1))


if __name__ == "__main__":
    main()
