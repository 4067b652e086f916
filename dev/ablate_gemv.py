"""Where a decode batch's GEMV time goes: the production GEMV (shaders/gemv_q.wgsl, as a decode plan of M rows
builds it: q/k/v with the norm, the output with its residual, gate+up with the GLU, down, the LM head) timed
with one part taken out at a time (results wrong on purpose), as dev/ablate_decode_attention.py does for the
batched attention. The question behind issue 23's 16-row steps (the 1B's multi-row GEMVs, 0.90x llama.cpp's
S_TG at B = 16): are they bound by the weight loads, the x loads, the integer dots or the rest?

    python3 dev/ablate_gemv.py [--set 1b|8b] [--m 16] [--nodes qkv,o,glu,down,lm] [--rotate 4]
    python3 dev/ablate_gemv.py --set test --m 6 --nodes qkv,glu,down --rotate 1 --copies 1   # lavapipe

Each node's dispatches (the x quantization, then the GEMV; dev/bench_batch.py's Node) over ``--rotate``
weight copies, every copy writing the same output (so the copies run one after another, and their weights
come from memory as a model's layers do), after the clock is raised; us per node. Ablations (edits of the
expanded source): ``no_wload`` (the weight words synthesized from their index: no weight reads),
``no_xload`` (the quantized x words and scales not read: zeros), ``no_dot`` (dot4I8Packed -> an xor), ``x_l1``
(x words read from its first 16 KiB: the same loads, all cache hits), ``no_red`` (the group's sums added in
each lane: no shuffles, no workgroup hop), ``no_scale`` (the K-quant sub-block scales not decoded).
``no_xload`` lets the compiler drop the dots and the weight decode too (x = 0), so it times the kernel's
skeleton more than the x loads.
``--splits "name:key=v,key=v;..."`` times GEMV splits instead (the ``gemv`` attr's overrides, e.g.
``xr2r8:xr=2,r=8;nou2:u2=0;g8:gpw=8``; ``full`` is the default split): each row's sums stay the row
alone's whatever R, XR or GPW, so any split that wins can be taken (not so ``u2`` or ``tpr``: they change
the order of the sums, and the one-row split would have to change with them).
The node's matmuls may take the matrix units instead at some M (ops/gemm.py over_gemv): those nodes are
reported as such and not ablated. Needs a GPU.
"""
from __future__ import annotations

import argparse
import re
import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

import bench_batch as bb  # noqa: E402
from ablation import ablate, drop  # noqa: E402
from bench_gemv import time_variants  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.errors import DeviceError  # noqa: E402

ABLATIONS = {
    "full": None,
    "no_wload": lambda src: re.sub(r"return (W4|W14)\[i\];", "return vec4<u32>(i, i ^ 0x5A5A5A5Au, 3u * i, i + 7u);",
                                   re.sub(r"return (W|W1)\[i\];", "return i ^ 0x3C003C00u;", src)),
    "no_xload": drop(r"r\.xq\.(q\[\d\]|d) = xqw\("),
    "no_dot": lambda src: src.replace("return dot4I8Packed(w, x);", "return i32(w ^ x);"),
    "x_l1": lambda src: src.replace("return bitcast<u32>(X[w >> 2u][w & 3u]);",
                                    "return bitcast<u32>(X[(w >> 2u) & 1023u][w & 3u]);"),
    "no_red": lambda src: src.replace(
        "let tq = group_sum(lane, grp, gl, pt.acc);",
        "var zz = 0.0; for (var r = 0u; r < NVA; r++) { zz += pt.acc[r]; } let tq = vec2<f32>(zz, 1.0);"),
    "no_scale": lambda src: src.replace(
        "fn kscales(hdr: vec4<u32>, j: u32) -> vec4<f32> {",
        "fn kscales(hdr: vec4<u32>, j: u32) -> vec4<f32> { return vec4<f32>(f32(hdr.x & 255u), 1.0, 2.0, f32(j)); }\n"
        "fn kscales_ablated(hdr: vec4<u32>, j: u32) -> vec4<f32> {"),
}


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="1b", choices=sorted(bb.SETS))
    ap.add_argument("--m", type=int, default=16)
    ap.add_argument("--nodes", default="qkv,o,glu,down,lm")
    ap.add_argument("--rotate", type=int, default=4)
    ap.add_argument("--copies", type=int, default=5, help="passes of the rotated copies per timing")
    ap.add_argument("--splits", default="", help='"name:key=v,key=v;...": GEMV splits timed instead of ablations')
    a = ap.parse_args()
    splits = {"full": {}}
    for spec in filter(None, a.splits.split(";")):
        name, _, kv = spec.partition(":")
        splits[name] = {k: int(v) for k, v in (f.split("=") for f in kv.split(",") if f)}
    dev = Device.get()
    dev.write_params(Params(pos=0, n_tokens=a.m))
    nodes = {**bb.SETS[a.set], **({"lm": bb.LM_HEAD[a.set]} if a.set in bb.LM_HEAD else {})}
    plain = dev.shader_source
    print(f"{a.set}, M={a.m}, {a.rotate} weight copies a pass; us per node (its x quantization and GEMV)")
    for name in a.nodes.split(","):
        kind, k, ws = nodes[name]
        dss, names = [], []
        for abl, edit in (ABLATIONS.items() if not a.splits else ((n, None) for n in splits)):
            ablate(dev, plain, "gemv_q.wgsl", abl, edit)
            flags = ("u2", "q8x", "xq", "xs", "xclamp", "magic")
            attrs = {"gemv": {k_: bool(v) if k_ in flags else v for k_, v in splits[abl].items()}} \
                if a.splits and splits[abl] else {}
            try:
                ds = [d for run in bb.Node(dev, kind, k, ws, a.m, attrs, a.rotate, one_y=True).runs for d in run]
            except (ValueError, DeviceError) as e:   # an ablation that matched nothing, a split that cannot be
                print(f"  {name}: {abl}: {e}")
                continue
            if not any("gemv_q" in str(d.pipeline.label) for d in ds):
                print(f"  {name}: no GEMV at M={a.m} ({', '.join(sorted({str(d.pipeline.label) for d in ds}))})")
                break
            dss.append(ds)
            names.append(abl)
        dev.shader_source = plain
        if not dss:
            continue
        secs = time_variants(dev, dss, a.copies)
        print(f"  {name:5} " + "  ".join(f"{n} {s * 1e6 / a.rotate:8.1f}" for n, s in zip(names, secs)), flush=True)


if __name__ == "__main__":
    main()
