"""Variant sweep of the decode-batch nodes (dev/bench_batch.py's nodes and attention), for choosing splits:
each variant's output is checked against float64 (references cached per node and M), then timed.

    python3 dev/probe_batch.py [--set 8b] [--what gemv,mma,attn] [--m 2,4,8,16] [--copies 4] [--out DIR]

``gemv``: the multi-row GEMV at each M with x rows per group (xr), weight rows per group (r) and float
dots (q8x off) varied; ``mma``: the matrix-unit GEMM's tiles and split-k at each M (17..64);
``attn``: rope_kv_attention of M decode rows at depth 512 (block tables of --ctx keys) with the split count,
key slices, rows per workgroup and splits per workgroup varied (its copies run on buffers of their own and
may overlap: dev/ablate_decode_attention.py --shapes times them one after another). Results:
``probe.jsonl`` under --out and one line per variant on stdout.
"""
from __future__ import annotations

import argparse
import functools
import importlib
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parent))
# --tree DIR: time another checkout's kernels (imported before bench_batch puts this one first)
_TREE = sys.argv[sys.argv.index("--tree") + 1] if "--tree" in sys.argv else str(Path(__file__).resolve().parents[1])
sys.path.insert(0, _TREE)
importlib.import_module("oxigpu.backends.wgpu.ops.matmul")

import bench_batch as bb  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.kernel import rel_error  # noqa: E402
from oxigpu.backends.wgpu.ops.matmul import NORM_EPS, glu64  # noqa: E402
from oxigpu.quant import dequantize, get_type  # noqa: E402

bb.weight = functools.lru_cache(maxsize=None)(bb.weight)
_deq = functools.lru_cache(maxsize=None)(lambda t, n, k, seed: dequantize(bb.weight(t, n, k, seed), get_type(t))
                                         .astype(np.float32))
_REF: dict = {}


def reference(node: bb.Node, name: str, ws: list, k: int) -> list[np.ndarray]:
    key = (name, node.m)
    if key not in _REF:
        x = node.x.astype(np.float64)
        if node.kind in ("glu", "qkv"):
            x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + NORM_EPS) * node.nw
        specs = [(t, n, i) for i, (n, t) in enumerate(ws)]
        if node.kind == "glu":
            specs = [specs[0], (specs[0][0], specs[0][1], 7)]
        ys = [x @ _deq(t, n, k, s).T.astype(np.float64) for t, n, s in specs]
        if node.kind == "glu":
            ys = [glu64(ys[0], ys[1], "silu")]
        elif node.kind == "add":
            ys = [ys[0] + node.res]
        _REF[key] = ys
    return _REF[key]


def check(node: bb.Node, name: str, ws: list, k: int) -> float:
    node.dev.write_params(Params(pos=0, n_tokens=node.m))
    node.dev.submit(node.runs[0])
    err = 0.0
    for (buf, off, _), want in zip(node.ybufs[0], reference(node, name, ws, k)):
        err = max(err, rel_error(node.dev.read(buf, np.float32, want.shape, off), want))
    return err


def gemv_variants(m: int) -> list[tuple[str, dict]]:
    out = [("default", {})]
    for xr in (4, 8):
        if xr <= m:
            for r in (1, 2, 4):
                if r * xr <= 16:
                    out.append((f"xr{xr}r{r}", {"gemv": {"xr": xr, "r": r}}))
    return out


def mma_variants(m: int, node: str, half: bool = False, only: str = "") -> list[tuple[str, dict]]:
    """The matrix-unit GEMM's tiles x split-k; ``half``: each also with the K-quant weights dequantized in
    f16 arithmetic (name suffix h), and the default tile with each loader (defaulth, defaultq: q32)."""
    out = [("default", {})] + ([("defaulth", {"gemm": {"half": True}}), ("defaultq", {"gemm": {"half": False}})]
                               if half else [])
    tiles = {"32x128": dict(tm=2, tn=8, sn=4), "64x64": dict(tm=4, tn=4, sn=2), "64x128": dict(tm=4, tn=8, sn=4),
             "64x64n4": dict(tm=4, tn=4, sn=4), "32x64": dict(tm=2, tn=4, sn=2)}
    for name, t in tiles.items():
        if only and name not in only.split(","):
            continue
        for s in (1, 2, 4, 8, 16):
            if node == "glu" and s == 1 and t["sn"] != 4:
                continue    # the unsplit GLU epilogue pairs 4 blocks along n
            out.append((f"{name}s{s}", {"gemm": {"mma": True, **t, "splits": s}}))
            if half:
                out.append((f"{name}s{s}h", {"gemm": {"mma": True, **t, "splits": s, "half": True}}))
    return out


def time_attn(dev: Device, m: int, depth: int, heads: tuple, copies: int, attrs: dict,
              ctx: int = 0) -> tuple[float, float]:
    from oxigpu.backends.wgpu.kernel import prepare
    from oxigpu.backends.wgpu.ops._common import Batch
    from oxigpu.backends.wgpu.ops.rope_attention import paged_rope_kv_attention_case
    H, Hkv, D = heads
    blocks = -(-max(depth + 1, ctx) // 32)
    b = Batch([(s, depth, 1) for s in range(m)], m, blocks, m * blocks + 1, seed=m)
    case = paged_rope_kv_attention_case("probe", b, H, Hkv, D, seed=1, **attrs)
    preps = [prepare(case.op, case.inputs, case.attrs, case.in_types, dev) for _ in range(copies)]
    dev.write_params(case.params())
    dev.submit(preps[0].dispatches)
    got = dev.read(preps[0].out_bufs[0], np.float32, preps[0].out_shapes[0])
    err = rel_error(got, case.reference()[0])
    seq = [d for p in preps for d in p.dispatches]
    one = dev.time_passes([seq])[0] / copies
    per = max(1, int(0.02 / max(one * copies, 1e-7)))
    return float(np.median(dev.time_passes([seq * per] * 5))) / (per * copies), err


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="8b", choices=sorted(bb.SETS))
    ap.add_argument("--what", default="gemv,mma,attn")
    ap.add_argument("--m", default="")
    ap.add_argument("--nodes", default="")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--depth", type=int, default=512)
    ap.add_argument("--ctx", type=int, default=0, help="attn: keys a sequence's block table holds (default: depth + 1)")
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--tree", default="", help="checkout whose oxigpu is timed (default: this one)")
    ap.add_argument("--label", default="")
    ap.add_argument("--nocheck", action="store_true", help="time only (err reported as 0)")
    ap.add_argument("--half", action="store_true", help="mma: each variant also with f16-arithmetic K-quant loaders")
    ap.add_argument("--tiles", default="", help="mma: only these tiles (e.g. 64x64,64x128)")
    a = ap.parse_args()
    dev = Device.get()
    print(f"oxigpu from {Path(sys.modules['oxigpu'].__file__).parent}", flush=True)
    print(f"device: {dev.info()['name']}; int8 dots {dev.int8_dots}, mma {dev.has_mma}", flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    what = a.what.split(",")
    f = open(out / "probe.jsonl", "a")

    def emit(rec: dict) -> None:
        f.write(json.dumps(rec) + "\n")
        f.flush()
        rec["label"] = a.label
        print(f"{a.label:5} {rec['what']:5} {rec['node']:5} M={rec['m']:3} {rec['variant']:12} {rec['us']:9.1f} us  "
              f"err {rec['err']:.1e}", flush=True)

    nodes = {n: v for n, v in bb.SETS[a.set].items() if not a.nodes or n in a.nodes.split(",")}
    if "lm" in a.nodes.split(",") and a.set in bb.LM_HEAD:
        nodes["lm"] = bb.LM_HEAD[a.set]
    for w in what:
        ms = [int(v) for v in a.m.split(",")] if a.m else {"gemv": [2, 4, 8, 16], "mma": [16, 32, 64],
                                                            "attn": [1, 2, 16, 64],
                                                            "default": [1, 2, 4, 8, 16, 32, 64]}[w]
        for m in ms:
            if w == "attn":
                H, Hkv, D = bb.ATTN[a.set]
                vs = [("default", {})] + [(f"split{s}", {"n_split": s}) for s in (1, 2, 8, 16)] + \
                     [(f"ks{s}", {"key_slices": s}) for s in (1, 2, 8)] + \
                     [(f"rows{r}", {"decode_rows": r}) for r in (1, 4)] + \
                     [(f"sg{g}", {"split_group": g}) for g in (1, 2, 3, 5, 8)]
                for name, attrs in vs:
                    try:
                        t, err = time_attn(dev, m, a.depth, bb.ATTN[a.set], a.copies, attrs, a.ctx)
                    except Exception as e:   # noqa: BLE001 - a variant the kernel refuses
                        print(f"attn M={m} {name}: {type(e).__name__}: {e}", flush=True)
                        continue
                    emit({"what": w, "node": "attn", "m": m, "variant": name, "us": t * 1e6, "err": err,
                          "depth": a.depth, "ctx": a.ctx})
                continue
            for node_name, (kind, k, ws) in nodes.items():
                vs = (gemv_variants(m) if w == "gemv" else mma_variants(m, node_name, a.half, a.tiles)
                      if w == "mma" else [("default", {})])
                for name, attrs in vs:
                    try:
                        node = bb.Node(dev, kind, k, ws, m, attrs, a.copies)
                        err = 0.0 if a.nocheck else check(node, node_name, ws, k)
                        t = min(node.time(), node.time())   # the first may run at idle clocks
                    except Exception as e:   # noqa: BLE001 - a variant the kernel refuses
                        print(f"{w} {node_name} M={m} {name}: {type(e).__name__}: {e}", flush=True)
                        continue
                    emit({"what": w, "node": node_name, "m": m, "variant": name, "us": t * 1e6, "err": err})
                    del node


if __name__ == "__main__":
    main()
