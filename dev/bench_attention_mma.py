"""Prefill attention on the matrix units (shaders/attention_mma.wgsl) against the FMA kernel
(shaders/attention.wgsl), per matrix-unit tile: correctness against float64, then GPU time.

    python3 dev/bench_attention_mma.py [--out DIR] [--copies N] [--tiles 4:64,4:32]

Per case (ops/attention.py ``attention_case``: random q, f16 caches whose rows past pos + n_tokens are NaN;
"rescale" cases grow the keys along the cache so later tiles move the reference maximum): every kernel's
output against the float64 reference (the matrix-unit one rounds q * scale and P to f16: held to
MMA_TOL of max |ref|, the FMA one to its 2e-5), then all timed (N copies in one pass, GPU timestamps:
dev/bench_gemv.py ``time_variants``). TFLOP/s = the case's FLOPs (every row over all pos + n_tokens
keys, as ops/attention.py counts them) / time. Needs Dawn with subgroup matrices (the H100); results
also go to ``attention_mma.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from bench_gemv import time_variants  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.ops.attention import Attention, attention_case  # noqa: E402

CASES = [   # name, T, n_tokens, pos, heads, KV heads, head dim, n_ctx, extra attrs, key growth
    ("check D=64 GQA7 T=150 n_tokens=141 pos=93", 150, 141, 93, 14, 2, 64, 240, {}, 0.0),
    ("check D=128 GQA4 T=70 n_tokens=66 pos=5", 70, 66, 5, 8, 2, 128, 80, {}, 0.0),
    ("check rescale D=64 T=200 pos=40", 200, 200, 40, 8, 2, 64, 256, {}, 4.0),
    ("check rescale D=128 window=70 softcap=20", 130, 130, 17, 4, 4, 128, 160,
     {"window": 70, "softcap": 20.0}, 4.0),
    ("qwen2.5-0.5b pp512", 512, 512, 0, 14, 2, 64, 512, {}, 0.0),
    ("llama-3.2-1b pp512", 512, 512, 0, 32, 8, 64, 512, {}, 0.0),
    ("llama-3.1-8b pp512", 512, 512, 0, 32, 8, 128, 512, {}, 0.0),
    ("llama-3.1-8b pp512 pos=512", 512, 512, 512, 32, 8, 128, 1024, {}, 0.0),
    ("qwen2.5-0.5b pp512 pos=4096", 512, 512, 4096, 14, 2, 64, 4608, {}, 0.0),
    ("llama-3.2-1b pp512 pos=4096", 512, 512, 4096, 32, 8, 64, 4608, {}, 0.0),
    ("llama-3.1-8b pp512 pos=4096", 512, 512, 4096, 32, 8, 128, 4608, {}, 0.0),
]
MMA_TOL = 5e-3


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--copies", type=int, default=20)
    ap.add_argument("--tiles", default="4:64,4:32", help="matrix-unit tiles NSG:BK to time; "
                    "NSG:BK/uK: with key units of K keys")
    ap.add_argument("--cases", default="", help="only the cases whose name holds one of these (comma list)")
    ap.add_argument("--no-fma", action="store_true", help="time the matrix-unit tiles only")
    args = ap.parse_args()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], "mma:", dev.has_mma, "workgroup memory:",
          dev.limits["max-compute-workgroup-storage-size"], flush=True)
    recs = []
    for name, T, n_tok, pos, H, Hkv, D, n_ctx, extra, growth in CASES:
        if args.cases and not any(c in name for c in args.cases.split(",")):
            continue
        case = attention_case(name, T, n_tok, pos, H, Hkv, D, n_ctx, seed=len(recs), **extra)
        q, ck, cv = case.inputs
        if growth:
            ck *= (1.0 + growth * np.arange(n_ctx) / n_ctx).astype(np.float16)[:, None]
        ref = case.reference()[0][:n_tok]
        bufs = [dev.upload(a) for a in (q, ck, cv)]
        kinds = [("fma", {"prefill_mma": False})] * (not args.no_fma)
        for t in args.tiles.split(","):   # NSG:BK, or NSG:BK/u<keys per unit>
            tile, _, units = t.partition("/u")
            kinds.append((f"mma {t}", {"prefill_mma": tile, "prefill_units": int(units or 0)}))
        kernels, outs, dss = [], [], []
        for kind, a in kinds:
            try:
                k = Attention(dev, case.attrs | a, [x.shape for x in (q, ck, cv)], case.in_types, [(T, H * D)])
            except Exception as ex:   # a tile over the workgroup memory limit
                print(f"{name:44} {kind:9} skipped: {ex}", flush=True)
                continue
            o = dev.upload(np.full((T, H * D), np.nan, np.float32))
            kernels.append(kind)
            outs.append(o)
            dss.append(k.encode([*bufs, o]))
        dev.write_params(Params(pos=pos, n_tokens=n_tok))
        dev.submit([d for ds in dss for d in ds])
        errs = [float(np.abs(dev.read(o, np.float32, (T, H * D))[:n_tok] - ref).max() / np.abs(ref).max())
                for o in outs]
        secs = time_variants(dev, dss, args.copies)
        for kind, err, s in zip(kernels, errs, secs):
            tol = case.tol if kind == "fma" else MMA_TOL
            rec = {"case": name, "kernel": kind, "us": s * 1e6, "tflops": case.flops / s / 1e12, "rel_err": err,
                   "ok": bool(err <= tol)}
            recs.append(rec)
            print(f"{name:44} {kind:9} {rec['us']:9.1f} us {rec['tflops']:7.2f} TFLOP/s  err {err:.1e}"
                  f"{'' if rec['ok'] else '  WRONG'}", flush=True)
    with open(Path(args.out) / "attention_mma.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
