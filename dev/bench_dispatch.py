"""What one dispatch boundary costs a decode step, apart from its bytes (docs/perf-log.md, "What limits").

    python3 dev/bench_dispatch.py [--out DIR] [--copies N]

In the 8B's decode step every matmul costs ~5-6 us plus its bytes at ~2.6 TB/s; this splits that fixed
part. Each case is N dispatches of one kernel in one compute pass (GPU timestamps at the pass ends, us per
dispatch, median of 3 rounds, clocks warmed first: dev/bench_gemv.py ``time_variants``):
- ``chain G``: dispatch k reads buffer k % 2 and writes buffer (k + 1) % 2, so each waits for the one
  before (the barrier Dawn puts between dependent dispatches), G workgroups of 256 invocations, one word
  each: launch + barrier + drain of an almost empty grid;
- ``free G`` (G <= 2112): the same kernel, every dispatch writing its own buffer and reading one that
  none writes: no barrier between them (what the GPU does with independent dispatches);
- ``stream B``: dispatches that each read B MB (vec4 loads, 1056 workgroups, a grid-stride loop) and
  read-modify-write one word per workgroup of the same buffer, so each waits for the one before: bytes /
  bandwidth + fixed cost; the 4 and 16 MB cases give both.
Results also go to ``dispatch_cost.jsonl`` (one record per case).
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

from oxigpu.backends.wgpu.device import Device, workgroups_for  # noqa: E402

WG = 256
SHADER = """
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;
const N4: u32 = {n4}u;   // vec4s each dispatch reads (stream), or 0 (one word per invocation)

@compute @workgroup_size({wg})
fn main(@builtin(global_invocation_id) gid: vec3<u32>, @builtin(workgroup_id) wid: vec3<u32>,
        @builtin(num_workgroups) nwg: vec3<u32>, @builtin(local_invocation_index) lid: u32) {{
  let g = wid.y * nwg.x + wid.x;
  let i = g * {wg}u + lid;
  if (N4 == 0u) {{
    dst[i] = src[i / 4u][i % 4u] * 0.5 + 1.0;
    return;
  }}
  var acc = vec4<f32>(0.0);
  for (var j = i; j < N4; j += nwg.x * nwg.y * {wg}u) {{ acc += src[j]; }}
  let s = acc.x + acc.y + acc.z + acc.w;
  if (s == 1.2345e-30) {{ dst[g] = s; }}   // never (random data): keeps the loads
  if (lid == 0u) {{ dst[g] = dst[g] * 0.5; }}
}}
"""


def pipeline(dev: Device, n4: int):
    code = SHADER.format(n4=n4, wg=WG)
    module = dev.device.create_shader_module(code=code, label=f"bench_dispatch n4={n4}")
    return dev.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--copies", type=int, default=64, help="dispatches per timed pass")
    args = ap.parse_args()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], flush=True)
    n = args.copies
    grids = [1, 132, 528, 2112, 8448]
    words = max(grids) * WG
    g = np.random.default_rng(0)
    a, b = (dev.upload(g.standard_normal(words).astype(np.float32)) for _ in range(2))
    ro = dev.upload(g.standard_normal(words).astype(np.float32))
    outs = [dev.create_buffer(4 * 2112 * WG, label=f"free out {i}") for i in range(n)]
    tiny = pipeline(dev, 0)
    cases, dss = [], []
    for G in grids:
        wg = workgroups_for(G)
        pair = [dev.bind_group(tiny, {0: a, 1: b}), dev.bind_group(tiny, {0: b, 1: a})]
        cases.append(("chain", G, 0))
        dss.append([(tiny, pair[k % 2], wg) for k in range(n)])
        if G <= 2112:
            cases.append(("free", G, 0))
            dss.append([(tiny, dev.bind_group(tiny, {0: ro, 1: outs[k]}), wg) for k in range(n)])
    for mb in (4, 16, 64):
        n4 = mb * 2**20 // 16
        big = dev.upload(g.standard_normal(4 * n4).astype(np.float32))
        pipe = pipeline(dev, n4)
        bg = dev.bind_group(pipe, {0: big, 1: dev.create_buffer(4 * 1056, label="stream out")})
        cases.append(("stream", 1056, mb))
        dss.append([(pipe, bg, workgroups_for(1056))] * n)
    secs = time_variants(dev, dss, 1)
    path = Path(args.out) / "dispatch_cost.jsonl"
    with open(path, "a") as f:
        for (kind, G, mb), s in zip(cases, secs):
            us = s / n * 1e6
            rec = {"case": kind, "workgroups": G, "mb": mb, "us_per_dispatch": us}
            if mb:
                rec["gbs"] = mb * 2**20 / (us * 1e-6) / 1e9
            f.write(json.dumps(rec) + "\n")
            extra = f"  {rec['gbs']:7.0f} GB/s" if mb else ""
            print(f"{kind:6} {G:5d} wg {mb:3d} MB  {us:8.2f} us/dispatch{extra}", flush=True)
    st = {mb: s / n for (kind, _, mb), s in zip(cases, secs) if kind == "stream"}
    fixed = (st[4] * 16 - st[16] * 4) / 12          # t = fixed + bytes / bw, from 4 and 16 MB
    bw = 12 * 2**20 / (st[16] - st[4])
    print(f"stream fit (4 / 16 MB): fixed {fixed * 1e6:.2f} us + bytes at {bw / 1e9:.0f} GB/s; "
          f"64 MB predicted {(fixed + 64 * 2**20 / bw) * 1e6:.1f} us, measured {st[64] * 1e6:.1f}")


if __name__ == "__main__":
    main()
