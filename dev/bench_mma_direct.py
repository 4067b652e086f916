"""F16 prefill GEMM on the matrix units with fragments loaded straight from storage, against the
production kernel (gemm_mma.wgsl, which stages x and weights through workgroup memory as f16 scalars):
the measurement that decides whether the 8B F16 pp512 gap (docs/perf-log.md, "What limits") closes by
dropping the staging.

    python3 dev/bench_mma_direct.py [--out DIR] [--m 512] [--variants FMxFN/SGMxSGN[/uU],...]

A variant ``FMxFN/SGMxSGN`` is a workgroup of SGM x SGN subgroups (32 lanes: NVIDIA's size), each
computing FM x FN blocks of 16 x 16 results; every k step of 16 loads its FM left fragments from x (f16,
[m][k]) and FN right fragments from the weight (f16, [n][k], read column-major) with
``subgroupMatrixLoad`` on the storage buffers (L1/L2 give the reuse across subgroups), and the results go
out with ``subgroupMatrixStore``. ``/u2``: two k steps per loop turn (more loads in flight). Each output
is checked against float64 of the f16-rounded inputs (max |err| / max |ref| <= 1e-3), then timed as in
bench_gemv.py ``time_variants`` (N copies per pass, GPU timestamps). ``prod``: MatmulKernel as the
backend runs it (its x pass included). Needs Dawn with subgroup matrices (the H100); results go to
``mma_direct.jsonl``.
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

from oxigpu.backends.wgpu.device import Device  # noqa: E402
from oxigpu.backends.wgpu.ops.matmul import MatmulKernel  # noqa: E402

SHAPES = {"qkv": (6144, 4096), "o": (4096, 4096), "gateup": (28672, 4096), "down": (4096, 14336)}


def shader(m: int, n: int, k: int, fm: int, fn: int, sgm: int, sgn: int, unroll: int) -> str:
    acc = [(i, j) for i in range(fm) for j in range(fn)]
    decl = "\n".join(f"  var c{i}{j}: subgroup_matrix_result<f32, 16, 16>;" for i, j in acc)
    step = []
    for u in range(unroll):
        kk = f"k0 + {16 * u}u"
        left, right = "subgroup_matrix_left<f16, 16, 16>", "subgroup_matrix_right<f16, 16, 16>"
        step += [f"    let a{i}_{u} = subgroupMatrixLoad<{left}>(&X, xo + {16 * i}u * K + {kk}, false, K);"
                 for i in range(fm)]
        step += [f"    let b{j}_{u} = subgroupMatrixLoad<{right}>(&W, wo + {16 * j}u * K + {kk}, true, K);"
                 for j in range(fn)]
    for u in range(unroll):
        step += [f"    c{i}{j} = subgroupMatrixMultiplyAccumulate(a{i}_{u}, b{j}_{u}, c{i}{j});" for i, j in acc]
    store = "\n".join(f"  subgroupMatrixStore(&Y, (m0 + {16 * i}u) * N + n0 + {16 * j}u, c{i}{j}, false, N);"
                      for i, j in acc)
    nl = "\n"
    return f"""
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<storage, read> X: array<f16>;
@group(0) @binding(1) var<storage, read> W: array<f16>;
@group(0) @binding(2) var<storage, read_write> Y: array<f32>;
const N: u32 = {n}u;
const K: u32 = {k}u;
@compute @workgroup_size({32 * sgm * sgn})
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {{
  let sg = lid / 32u;
  let m0 = wid.y * {16 * fm * sgm}u + (sg % {sgm}u) * {16 * fm}u;
  let n0 = wid.x * {16 * fn * sgn}u + (sg / {sgm}u) * {16 * fn}u;
  let xo = m0 * K;
  let wo = n0 * K;
{decl}
  for (var k0 = 0u; k0 < K; k0 += {16 * unroll}u) {{
{nl.join(step)}
  }}
{store}
}}
"""


def parse(v: str) -> tuple[int, int, int, int, int]:
    parts = v.split("/")
    fm, fn = (int(a) for a in parts[0].split("x"))
    sgm, sgn = (int(a) for a in parts[1].split("x"))
    unroll = int(parts[2][1:]) if len(parts) > 2 else 1
    return fm, fn, sgm, sgn, unroll


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="2x4/4x2,4x4/2x2,4x4/2x2/u2,4x2/2x4,4x4/2x4,2x4/4x2/u2,4x4/4x2")
    ap.add_argument("--copies", type=int, default=5)
    args = ap.parse_args()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], "mma:", dev.has_mma, flush=True)
    rng = np.random.default_rng(0)
    m = args.m
    recs = []
    for name in args.shapes.split(","):
        n, k = SHAPES[name]
        x = rng.standard_normal((m, k)).astype(np.float16)
        w = (rng.standard_normal((n, k)) * 0.05).astype(np.float16)
        ref = x.astype(np.float64) @ w.astype(np.float64).T
        xb, wb = dev.upload(x), dev.upload(w)
        xf = dev.upload(x.astype(np.float32))
        cases, dss, outs = [], [], []
        prod = MatmulKernel(dev, {}, [(m, k), (n, k)], ["f32", "F16"], [(m, n)])
        yb = dev.create_buffer(4 * m * n)
        cases.append("prod")
        dss.append(prod.encode([xf, wb, yb]))
        outs.append(yb)
        for v in args.variants.split(","):
            fm, fn, sgm, sgn, unroll = parse(v)
            bm, bn = 16 * fm * sgm, 16 * fn * sgn
            if m % bm or n % bn or k % (16 * unroll):
                print(f"{name} {v}: skipped (tile {bm} x {bn} does not divide {m} x {n})", flush=True)
                continue
            try:
                mod = dev.device.create_shader_module(code=shader(m, n, k, fm, fn, sgm, sgn, unroll))
                pipe = dev.device.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
            except Exception as e:   # noqa: BLE001 - a variant the compiler refuses is reported, not fatal
                print(f"{name} {v}: {type(e).__name__}: {str(e)[:300]}", flush=True)
                continue
            yv = dev.create_buffer(4 * m * n)
            bg = dev.bind_group(pipe, {0: xb, 1: wb, 2: yv})
            cases.append(v)
            dss.append([(pipe, bg, (n // bn, m // bm, 1))])
            outs.append(yv)
        secs = time_variants(dev, dss, args.copies)
        for v, s, yv in zip(cases, secs, outs):
            y = np.frombuffer(dev.queue.read_buffer(yv), np.float32).reshape(m, n)
            err = float(np.abs(y - ref).max() / np.abs(ref).max())
            rec = {"shape": name, "m": m, "n": n, "k": k, "variant": v, "us": s * 1e6,
                   "tflops": 2 * m * n * k / s / 1e12, "rel_err": err}
            recs.append(rec)
            bad = "  WRONG" if err > 1e-3 else ""
            print(f"{name:7} {m}x{n}x{k} {v:12} {s * 1e6:9.1f} us {rec['tflops']:7.1f} TFLOP/s err {err:.1e}{bad}",
                  flush=True)
    with open(Path(args.out) / "mma_direct.jsonl", "a") as f:
        for r in recs:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
