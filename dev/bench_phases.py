"""Dependent phases in ONE persistent dispatch (workgroups meet at a counter in storage) against one
dispatch per phase: what the persistent-layer step of docs/perf-log.md ("What limits") could win on a GPU.

    python3 dev/bench_phases.py [--out DIR] [--phases 5] [--mb 2,10,33] [--groups 132,264]

Each phase streams its own B MB (as a decode GEMV streams its weights) and needs one word that another
workgroup wrote in the phase before (as a GEMV needs the whole x its predecessor wrote):
- ``dispatches``: one dispatch per phase (the barrier Dawn puts between dependent dispatches);
- ``persistent``: one dispatch of G workgroups; between phases each workgroup does storageBarrier +
  atomicAdd on a counter and spins until all G have arrived; ``+prefetch``: each workgroup first loads its
  first vec4s of the next phase (which do not depend on the phase before), then waits.
The spin is bounded: past SPIN polls a workgroup sets an error flag and goes on, so a GPU that does not
keep all G workgroups resident gives a flagged (wrong) result, never a hang; flagged cases are reported,
not timed. us per phase: N copies in one compute pass, GPU timestamps (bench_gemv.py ``time_variants``).
Results also go to ``phases.jsonl``.
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
SPIN = 1 << 22
SHADER = """
@group(0) @binding(0) var<storage, read> src: array<vec4<f32>>;          // PHASES slices of N4 vec4s
@group(0) @binding(1) var<storage, read_write> dst: array<f32>;          // a word per workgroup and phase
@group(0) @binding(2) var<storage, read_write> sync: array<atomic<u32>>; // arrivals, error flag, leavers
const N4: u32 = {n4}u;
const G: u32 = {g}u;
const PHASES: u32 = {phases}u;
const FIRST: u32 = {first}u;     // the phase a one-phase dispatch runs (PERSIST: 0)
const PERSIST: bool = {persist};
const PREFETCH: bool = {prefetch};
const SPIN: u32 = {spin}u;

// Phase p's share of this workgroup, plus the word workgroup (g + 1) % G wrote in phase p - 1; v0/v1:
// the share's first two vec4s when loaded before the wait (PREFETCH), else loaded here.
fn phase(p: u32, g: u32, lid: u32, v0: vec4<f32>, v1: vec4<f32>) -> f32 {{
  let base = p * N4;
  let step = G * {wg}u;
  let i = g * {wg}u + lid;
  var acc = vec4<f32>(0.0);
  var j = i;
  if (PREFETCH) {{ acc = v0 + v1; j += 2u * step; }}   // (loaded by pre(), masked there)
  for (; j < N4; j += step) {{ acc += src[base + j]; }}
  var s = acc.x + acc.y + acc.z + acc.w;
  if (p > 0u) {{ s += dst[(p - 1u) * G + (g + 1u) % G]; }}
  return s;
}}

// The first two vec4s of phase p's share (zero past its end; the index kept inside src).
fn pre(p: u32, i: u32, k: u32) -> vec4<f32> {{
  let j = i + k * G * {wg}u;
  return select(vec4<f32>(0.0), src[min(p * N4 + j, PHASES * N4 - 1u)], j < N4);
}}

@compute @workgroup_size({wg})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {{
  let g = wid.y * nwg.x + wid.x;
  let i = g * {wg}u + lid;
  var v0 = vec4<f32>(0.0);
  var v1 = vec4<f32>(0.0);
  if (PREFETCH) {{ v0 = pre(FIRST, i, 0u); v1 = pre(FIRST, i, 1u); }}
  if (N4 == 0xFFFFFFFFu) {{ atomicStore(&sync[1], 1u); }}   // never: keeps sync in every layout
  var p = FIRST;
  loop {{
    let s = phase(p, g, lid, v0, v1);
    // the workgroup's word: one lane's sum stands in for the reduced total
    if (lid == 0u) {{ dst[p * G + g] = s; }}
    if (!PERSIST || p + 1u == PHASES) {{ break; }}
    if (PREFETCH) {{ v0 = pre(p + 1u, i, 0u); v1 = pre(p + 1u, i, 1u); }}
    storageBarrier();
    workgroupBarrier();
    if (lid == 0u) {{
      atomicAdd(&sync[0], 1u);
      let want = (p + 1u) * G;
      var n = 0u;
      loop {{
        if (atomicLoad(&sync[0]) >= want) {{ break; }}
        n++;
        if (n > SPIN) {{ atomicStore(&sync[1], 1u); break; }}
      }}
    }}
    workgroupBarrier();
    storageBarrier();
    p++;
  }}
  if (PERSIST && lid == 0u) {{      // the last to leave resets the counter for the next run
    if (atomicAdd(&sync[2], 1u) == G - 1u) {{ atomicStore(&sync[0], 0u); atomicStore(&sync[2], 0u); }}
  }}
}}
"""


def pipeline(dev: Device, **defines):
    code = SHADER.format(wg=WG, spin=SPIN, **{k: (str(v).lower() if isinstance(v, bool) else v)
                                              for k, v in defines.items()})
    module = dev.device.create_shader_module(code=code, label="bench_phases")
    return dev.device.create_compute_pipeline(layout="auto", compute={"module": module, "entry_point": "main"})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--phases", type=int, default=5, help="dependent phases (a decode layer has 5)")
    ap.add_argument("--mb", default="2,10,33", help="MB each phase streams")
    ap.add_argument("--groups", default="132,264", help="persistent workgroups (<= what stays resident)")
    ap.add_argument("--copies", type=int, default=20)
    args = ap.parse_args()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], flush=True)
    P, n = args.phases, args.copies
    rng = np.random.default_rng(0)
    cases, dss, syncs = [], [], []
    for mb in (float(x) for x in args.mb.split(",")):
        n4 = int(mb * 2**20) // 16
        src = dev.upload(rng.standard_normal(4 * n4 * P).astype(np.float32))
        for G in (int(x) for x in args.groups.split(",")):
            dst = dev.create_buffer(4 * G * P, label="phases dst")
            common = dict(n4=n4, g=G, phases=P)
            for kind in ("dispatches", "persistent", "persistent+prefetch"):
                sync = dev.create_buffer(16, label="phases sync")     # zero-filled; one per case
                if kind == "dispatches":
                    pipes = [pipeline(dev, **common, first=p, persist=False, prefetch=False) for p in range(P)]
                else:
                    pipes = [pipeline(dev, **common, first=0, persist=True, prefetch=kind.endswith("prefetch"))]
                cases.append((kind, mb, G))
                dss.append([(pi, dev.bind_group(pi, {0: src, 1: dst, 2: sync}), workgroups_for(G)) for pi in pipes])
                syncs.append(sync)
    secs = time_variants(dev, dss, n)
    with open(Path(args.out) / "phases.jsonl", "a") as f:
        for (kind, mb, G), s, sync in zip(cases, secs, syncs):
            flag = int(np.frombuffer(dev.queue.read_buffer(sync), np.uint32)[1])
            rec = {"case": kind, "mb": mb, "workgroups": G, "phases": P, "us_per_phase": s / P * 1e6,
                   "gbs": mb * 2**20 * P / s / 1e9, "spin_limit_hit": bool(flag)}
            f.write(json.dumps(rec) + "\n")
            note = "  SPIN LIMIT HIT: not all workgroups resident, result invalid" if flag else ""
            print(f"{kind:20} {mb:5.1f} MB x {P}  {G:4d} wg  {rec['us_per_phase']:8.2f} us/phase "
                  f"{rec['gbs']:7.0f} GB/s{note}", flush=True)


if __name__ == "__main__":
    main()
