"""Prefill attention on the matrix units (scripts/bench_attention_mma.wgsl) against the engine's FMA kernel
(shaders/attention.wgsl): the measurement that decides the 8B F16 pp512 step named in BENCHMARKS.md ("What
limits": attention is 147 us of a layer's chunk, ~15 TFLOP/s, 8.6 % of it).

    python3 scripts/bench_attention_mma.py [--out DIR] [--copies N]

Per case (ops/attention.py ``attention_case``: random q, f16 caches whose rows past pos + n_tokens are NaN,
float64 reference): both kernels' outputs against the reference (the matrix-unit one rounds q * scale and
P to f16: held to 5e-3 of max |ref|, the FMA one to its 2e-5), then both timed (N copies in one pass, GPU
timestamps: scripts/bench_gemv.py ``time_variants``). TFLOP/s = the case's FLOPs (every row over all pos +
n_tokens keys, as ops/attention.py counts them) / time. Needs Dawn
with subgroup matrices (the H100); results also go to ``attention_mma.jsonl``.
"""
from __future__ import annotations

import argparse
import json
import os
import shutil
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.wgpu.device import Device, Dispatch, Params  # noqa: E402
from oxigpu.backends.wgpu.ops._common import f32_lit  # noqa: E402
from oxigpu.backends.wgpu.ops.attention import Attention, attention_case  # noqa: E402
from bench_gemv import time_variants  # noqa: E402

CASES = [   # name, T, n_tokens, pos, heads, KV heads, head dim, n_ctx
    ("check D=64 GQA7 T=150 n_tokens=141 pos=93", 150, 141, 93, 14, 2, 64, 240),
    ("check D=128 GQA4 T=70 n_tokens=66 pos=5", 70, 66, 5, 8, 2, 128, 80),
    ("qwen2.5-0.5b pp512", 512, 512, 0, 14, 2, 64, 512),
    ("llama-3.2-1b pp512", 512, 512, 0, 32, 8, 64, 512),
    ("llama-3.1-8b pp512", 512, 512, 0, 32, 8, 128, 512),
]
MMA_TOL = 5e-3


def blocks(D: int, DV: int) -> dict[str, str]:
    """The unrolled subgroup-matrix code: Q fragments qa*, scores s0..s3, output blocks o*."""
    nq, no = D // 16, DV // 16
    L, R, A = "subgroup_matrix_left<f16, 16, 16>", "subgroup_matrix_right<f16, 16, 16>", \
        "subgroup_matrix_result<f32, 16, 16>"
    mma = "subgroupMatrixMultiplyAccumulate"
    qload = [f"  let qa{i} = subgroupMatrixLoad<{L}>(&kv, 16u * sg * LD + {16 * i}u, false, LD);"
             for i in range(nq)]
    sdecl = [f"    var s{j}: {A};" for j in range(4)]
    s_mma = []
    for i in range(nq):
        for j in range(4):   # K^T: (k = d, n = key), column-major from kv [key][d]
            kb = f"subgroupMatrixLoad<{R}>(&kv, {16 * j}u * LD + {16 * i}u, true, LD)"
            s_mma.append(f"    s{j} = {mma}(qa{i}, {kb}, s{j});")
    s_store = [f"    subgroupMatrixStore(&ss, 16u * sg * SL + {16 * j}u, s{j}, false, SL);" for j in range(4)]
    odecl = [f"  var o{j}: {A};" for j in range(no)]
    pv = []
    for kk in range(4):      # P (16 rows x 16 keys) times V (k = key, n = dv), row-major from kv [key][dv]
        pv.append(f"    let pa{kk} = subgroupMatrixLoad<{L}>(&ps, 16u * sg * PL + {16 * kk}u, false, PL);")
        for j in range(no):
            vb = f"subgroupMatrixLoad<{R}>(&kv, {16 * kk}u * LD + {16 * j}u, false, LD)"
            pv.append(f"    o{j} = {mma}(pa{kk}, {vb}, o{j});")
    out = []
    for g0 in range(0, no, 4):
        out += [f"  subgroupMatrixStore(&ss, 16u * sg * SL + {16 * (j - g0)}u, o{j}, false, SL);"
                for j in range(g0, min(g0 + 4, no))]
        out += ["  workgroupBarrier();",
                "  if (live) {",
                "    for (var c = c0; c < c0 + 32u; c++) {",
                f"      dst[(t * NH + h) * DV + {16 * g0}u + c] = ss[row * SL + c] / l;",
                "    }",
                "  }",
                "  workgroupBarrier();"]
    return {k: "\n".join(v) for k, v in (("QLOAD", qload), ("SDECL", sdecl), ("S_MMA", s_mma), ("S_STORE", s_store),
                                        ("ODECL", odecl), ("PV_MMA", pv), ("O_OUT", out))}


def mma_pipeline(dev: Device, T: int, H: int, Hkv: int, D: int, DV: int, scale: float):
    root = Path(__file__).resolve().parents[1] / "oxigpu" / "shaders"
    tmp = root / "_bench_attention_mma.wgsl"
    shutil.copy(Path(__file__).resolve().parent / "bench_attention_mma.wgsl", tmp)
    prb = -(-T * (H // Hkv) // 64)
    try:
        pipe = dev.pipeline(tmp.name, "main", {"D": D, "DV": DV, "G": H // Hkv, "NH": H, "NKV": Hkv, "T": T,
                                               "SCALE": f32_lit(scale), "PRB": prb, **blocks(D, DV)})
    finally:
        tmp.unlink()
    return pipe, prb * Hkv


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], "mma:", dev.has_mma, flush=True)
    recs = []
    for name, T, n_tok, pos, H, Hkv, D, n_ctx in CASES:
        case = attention_case(name, T, n_tok, pos, H, Hkv, D, n_ctx, seed=len(recs))
        q, ck, cv = case.inputs
        ref = case.reference()[0][:n_tok]
        bufs = [dev.upload(a) for a in (q, ck, cv)]
        outs = [dev.upload(np.full((T, H * D), np.nan, np.float32)) for _ in range(2)]
        fma = Attention(dev, case.attrs, [a.shape for a in (q, ck, cv)], case.in_types, [(T, H * D)])
        pipe, n_wg = mma_pipeline(dev, T, H, Hkv, D, D, case.attrs["scale"])
        bg = dev.bind_group(pipe, {0: dev.params_buffer, 1: bufs[0], 2: bufs[1], 3: bufs[2], 4: outs[1]})
        dss = [fma.encode([*bufs, outs[0]]), [Dispatch(pipe, bg, (n_wg, 1, 1))]]
        dev.write_params(Params(pos=pos, n_tokens=n_tok))
        dev.submit([d for ds in dss for d in ds])
        errs = [float(np.abs(dev.read(o, np.float32, (T, H * D))[:n_tok] - ref).max() / np.abs(ref).max())
                for o in outs]
        secs = time_variants(dev, dss, args.copies)
        for kind, err, s, tol in zip(("fma", "mma"), errs, secs, (case.tol, MMA_TOL)):
            rec = {"case": name, "kernel": kind, "us": s * 1e6, "tflops": case.flops / s / 1e12, "rel_err": err,
                   "ok": bool(err <= tol)}
            recs.append(rec)
            print(f"{name:44} {kind}  {rec['us']:9.1f} us {rec['tflops']:7.2f} TFLOP/s  err {err:.1e}"
                  f"{'' if rec['ok'] else '  WRONG'}", flush=True)
    with open(Path(args.out) / "attention_mma.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
