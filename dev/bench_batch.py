"""Decode-batch matmul benchmark: microseconds per node of real model shapes at M = 1 .. 64 rows (one row
per sequence), for the kernel the tuning tables pick and the alternatives around the GEMV / GEMM switch.

    python3 dev/bench_batch.py [--set 8b|1b|qwen|test] [--m 1,2,4,8,16,32,64] [--copies 4] [--out DIR]
                               [--attention 512,4096]

Each node is built as the model runs it: ``glu`` (gate and up joined in one buffer, activation epilogue,
RMS-norm prologue), ``qkv`` (q/k/v joined per weight type, norm prologue), ``o`` / ``down`` (matmul
with the residual add). Variants per M: ``default`` (what ops/matmul.py and ops/gemm.py pick on this
adapter: the multi-row GEMV up to Tuning.gemv_rows rows, else the GEMM), ``gemm`` (the GEMM's choice at
that M, forced below gemv_rows), ``gemv1`` (M one-row GEMVs, i.e. what M sequences cost without
batching), and on matrix-unit adapters ``mma64`` (the matrix-unit GEMM with the 64-row tile) against
the default's 32-row tile from 17 rows. Every variant's output is compared with float64 before it is timed
(``err``: ~1e-2 where x is int8 or f16, ~1e-6 in f32). Timing: ``--copies`` weight copies rotated so weights
come from memory, not the cache; per run the median over passes of ~20 ms between GPU timestamps.
Report: us per node, weight GB/s (the node's weight bytes once / time), and the per-row cost relative to
M = 1. ``--attention D1,D2``: rope_kv_attention of M decode rows (one sequence each, block tables) at
those depths, and at M = 1 the contiguous form single-stream plans ran before block tables (its cost of
the table). Results: ``batch_sweep.jsonl`` and a table on stdout. The ``test`` set is small, for a lavapipe
run (``--set test --m 1,3,16,20 --copies 1``).
"""
from __future__ import annotations

import argparse
import json
import os
import sys
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.kernel import rel_error  # noqa: E402
from oxigpu.backends.wgpu.layout import gpu_layout  # noqa: E402
from oxigpu.backends.wgpu.ops.matmul import (  # noqa: E402
    NORM_EPS,
    MatmulAddKernel,
    MatmulGluKernel,
    MatmulMultiKernel,
    gemv_rows,
    glu64,
)
from oxigpu.backends.wgpu.tuning import tuning  # noqa: E402
from oxigpu.quant import dequantize, get_type, quantize  # noqa: E402

SETS = {   # node: (kind, k, [(rows, type), ...])
    "8b": {"qkv": ("qkv", 4096, [(4096, "Q4_K"), (1024, "Q4_K"), (1024, "Q6_K")]),
           "o": ("add", 4096, [(4096, "Q4_K")]), "glu": ("glu", 4096, [(14336, "Q4_K")]),
           "down": ("add", 14336, [(4096, "Q6_K")])},
    "1b": {"qkv": ("qkv", 2048, [(2048, "Q4_K"), (512, "Q4_K"), (512, "Q6_K")]),
           "o": ("add", 2048, [(2048, "Q4_K")]), "glu": ("glu", 2048, [(8192, "Q4_K")]),
           "down": ("add", 8192, [(2048, "Q6_K")])},
    "qwen": {"qkv": ("qkv", 896, [(896, "Q5_0"), (128, "Q5_0"), (128, "Q8_0")]),
             "o": ("add", 896, [(896, "Q5_0")]), "glu": ("glu", 896, [(4864, "Q5_0")]),
             "down": ("add", 4864, [(896, "Q4_K")])},
    "test": {"qkv": ("qkv", 512, [(128, "Q4_K"), (32, "Q4_K"), (32, "Q6_K")]),
             "glu": ("glu", 512, [(96, "Q8_0")]), "down": ("add", 768, [(64, "Q6_K")])},
}
LM_HEAD = {"8b": ("add", 4096, [(128256, "Q6_K")]), "1b": ("add", 2048, [(128256, "Q6_K")])}
"""The LM head's shape (timed as a matmul with a residual: the same GEMV), once a step: not in the per-layer
sums; probe_batch.py --nodes lm."""
DISTINCT = 64   # quantized rows tiled to the full shape (cheap to build)


def weight(t: str, n: int, k: int, seed: int) -> np.ndarray:
    raw = quantize(np.random.default_rng(seed).standard_normal((DISTINCT, k), np.float32), get_type(t))
    return np.tile(raw, (-(-n // DISTINCT), 1))[:n]


class Node:
    """One node's kernel over ``copies`` weight copies (each its own dispatches), its inputs and check.
    ``one_y``: every copy writes the same output buffer, so the copies run one after another (each its own
    output lets them overlap)."""

    def __init__(self, dev: Device, kind: str, k: int, ws: list[tuple[int, str]], m: int, attrs: dict, copies: int,
                 one_y: bool = False):
        rng = np.random.default_rng(m)
        self.dev, self.kind, self.m = dev, kind, m
        self.x = rng.standard_normal((m, k)).astype(np.float32)
        self.nw = rng.uniform(0.5, 1.5, k).astype(np.float32)
        self.raws = [weight(t, n, k, i) for i, (n, t) in enumerate(ws)]
        self.types = [t for _, t in ws]
        if kind == "glu":
            self.raws = [self.raws[0], weight(self.types[0], ws[0][0], k, 7)]
            self.types = self.types * 2
        self.wbytes = sum(r.nbytes for r in self.raws)
        xb, nwb = dev.upload(self.x), dev.upload(self.nw)
        ns = [r.shape[0] for r in self.raws]
        self.ns = ns
        self.runs, self.ybufs = [], []
        # one residual for every copy: check() reads copy 0 against it (drawn per copy, the add nodes'
        # checks compared copy 0 with the last copy's residual: 1e-2 to 3e-2 "errors")
        self.res = rng.standard_normal((m, ns[0])).astype(np.float32) if kind not in ("glu", "qkv") else None
        slots = [256 * -(-4 * m * n // 256) for n in ns]    # qkv: its outputs in one buffer
        y_bytes = sum(slots) if kind == "qkv" else 4 * m * ns[0]
        shared = dev.create_buffer(y_bytes) if one_y else None
        for _ in range(copies):
            y = shared if shared is not None else dev.create_buffer(y_bytes)
            groups: dict[str, list[int]] = {}
            for i, t in enumerate(self.types):
                groups.setdefault(t, []).append(i)
            wb: list = [None] * len(self.raws)
            for idx in groups.values():       # one buffer per type, weights back to back (as the backend joins)
                buf = dev.upload(gpu_layout(np.concatenate([self.raws[i].reshape(-1) for i in idx]),
                                            self.types[idx[0]]))   # the GPU's block layout, as one tensor
                off = 0
                for i in idx:
                    wb[i] = (buf, off, self.raws[i].nbytes)
                    off += self.raws[i].nbytes
            if kind == "glu":
                kern = MatmulGluKernel(dev, {"act": "silu", "norm_eps": NORM_EPS, **attrs},
                                       [(m, k), (ns[0], k), (ns[1], k), (k,)], ["f32", *self.types, "f32"],
                                       [(m, ns[0])])
                ds = kern.encode([xb, wb[0], wb[1], nwb, y])
                self.ybufs.append([(y, 0, 4 * m * ns[0])])
            elif kind == "qkv":
                ys = [(y, sum(slots[:i]), 4 * m * n) for i, n in enumerate(ns)]
                kern = MatmulMultiKernel(dev, {"n_w": len(ns), "norm_eps": NORM_EPS, **attrs},
                                         [(m, k), *((n, k) for n in ns), (k,)], ["f32", *self.types, "f32"],
                                         [(m, n) for n in ns])
                ds = kern.encode([xb, *wb, nwb, *ys])
                self.ybufs.append(ys)
            else:
                kern = MatmulAddKernel(dev, attrs, [(m, k), (ns[0], k), (m, ns[0])], ["f32", self.types[0], "f32"],
                                       [(m, ns[0])])
                ds = kern.encode([xb, wb[0], dev.upload(self.res), y])
                self.ybufs.append([(y, 0, 4 * m * ns[0])])
            self.runs.append(ds)

    def check(self) -> float:
        """Max rel. error of copy 0's outputs against float64 (x normed for glu/qkv)."""
        self.dev.write_params(Params(pos=0, n_tokens=self.m))
        self.dev.submit(self.runs[0])
        x = self.x.astype(np.float64)
        if self.kind in ("glu", "qkv"):
            x = x / np.sqrt((x * x).mean(axis=1, keepdims=True) + NORM_EPS) * self.nw
        ys = [x @ dequantize(r, get_type(t)).astype(np.float64).T for r, t in zip(self.raws, self.types)]
        if self.kind == "glu":
            ys = [glu64(ys[0], ys[1], "silu")]
        elif self.kind == "add":
            ys = [ys[0] + self.res]
        err = 0.0
        for (buf, off, _), want in zip(self.ybufs[0], ys):
            got = self.dev.read(buf, np.float32, want.shape, off)
            err = max(err, rel_error(got, want))
        return err

    def time(self) -> float:
        one = self.dev.time_passes([[d for ds in self.runs for d in ds]])[0] / len(self.runs)
        per = max(1, int(0.02 / max(one * len(self.runs), 1e-7)))
        seq = [d for _ in range(per) for ds in self.runs for d in ds]
        t = np.median(self.dev.time_passes([seq] * 5)) / (per * len(self.runs))
        return float(t)


ATTN = {"8b": (32, 8, 128), "1b": (32, 8, 64), "qwen": (14, 2, 64), "test": (8, 2, 64)}   # heads, KV heads, D


def time_attention(dev: Device, m: int, n_kv: int, heads: tuple[int, int, int], copies: int) -> tuple[float, float]:
    """us of rope_kv_attention for m decode rows, each of its own sequence at depth n_kv (block tables of
    distinct blocks), and (m == 1) of the contiguous form the single-stream plans ran before block tables;
    0 where not run. Each copy has its own caches (layers), so the keys come from memory."""
    from oxigpu.backends.wgpu.kernel import prepare
    from oxigpu.backends.wgpu.ops._common import Batch
    from oxigpu.backends.wgpu.ops.rope_attention import paged_rope_kv_attention_case, rope_kv_attention_case
    H, Hkv, D = heads
    blocks = -(-(n_kv + 1) // 32)
    b = Batch([(s, n_kv, 1) for s in range(m)], m, blocks, m * blocks + 1, seed=m)
    out = []
    for case in (paged_rope_kv_attention_case("bench", b, H, Hkv, D, seed=1),
                 rope_kv_attention_case("bench", n_kv, H, Hkv, D, max(n_kv + 1, 64), seed=1) if m == 1 else None):
        if case is None:
            out.append(0.0)
            continue
        runs = [prepare(case.op, case.inputs, case.attrs, case.in_types, dev).dispatches for _ in range(copies)]
        dev.write_params(case.params())
        seq = [d for ds in runs for d in ds]
        one = dev.time_passes([seq])[0] / copies
        per = max(1, int(0.02 / max(one * copies, 1e-7)))
        out.append(float(np.median(dev.time_passes([seq * per] * 5))) / (per * copies))
    return out[0], out[1]


def variants(dev: Device, m: int) -> dict[str, tuple[dict, int]]:
    """name -> (node attrs, rows) for this M."""
    out = {"default": ({}, m)}
    if 1 < m <= tuning(dev).gemv_rows:
        out["gemm"] = ({"gemm": {}}, m)
    if m > 1:
        out["gemv1"] = ({}, 1)   # timed once, multiplied by M
    if dev.has_mma and 17 <= m <= 64:
        out["mma64"] = ({"gemm": {"mma": True, "tm": 4, "tn": 4, "sn": 2}}, m)
    return out


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--set", default="8b", choices=sorted(SETS))
    ap.add_argument("--m", default="1,2,4,8,16,32,64")
    ap.add_argument("--copies", type=int, default=4)
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--attention", default="", help="comma list of depths: also time rope_kv_attention of M "
                    "decode rows at each depth (and, at M = 1, the contiguous single-stream form)")
    a = ap.parse_args()
    dev = Device.get()
    print(f"device: {dev.info()['name']} ({dev.implementation}); int8 dots {dev.int8_dots}, mma {dev.has_mma}",
          flush=True)
    out = Path(a.out)
    out.mkdir(parents=True, exist_ok=True)
    rows = []
    base: dict[str, float] = {}
    with open(out / "batch_sweep.jsonl", "w") as f:
        for m in (int(v) for v in a.m.split(",")):
            for name, (kind, k, ws) in SETS[a.set].items():
                for var, (attrs, rows_) in variants(dev, m).items():
                    if var == "gemv1" and name in base:
                        t = base[name] * m
                        err = 0.0
                    else:
                        node = Node(dev, kind, k, ws, rows_, attrs, a.copies)
                        err = node.check()
                        t = node.time() * (m if var == "gemv1" else 1)
                        if m == 1:
                            base[name] = t
                    gemv = gemv_rows(dev, rows_, attrs)
                    wbytes = sum(get_type(tt).row_bytes(k) * n for n, tt in ws) * (2 if kind == "glu" else 1)
                    rec = {"set": a.set, "node": name, "m": m, "variant": var, "us": t * 1e6, "err": err,
                           "kernel": "gemv" if gemv else "gemm", "weight_gbs": wbytes / t / 1e9,
                           "per_row_vs_m1": t / m / base[name] if name in base else None}
                    f.write(json.dumps(rec) + "\n")
                    f.flush()
                    rows.append(rec)
                    print(f"{a.set:5} {name:5} M={m:3} {var:8} {rec['kernel']:5} {t * 1e6:9.1f} us "
                          f"{rec['weight_gbs']:8.1f} GB/s  err {err:.1e}", flush=True)
            for depth in (int(v) for v in a.attention.split(",") if v):
                paged, contiguous = time_attention(dev, m, depth, ATTN[a.set], a.copies)
                rec = {"set": a.set, "node": "attn", "m": m, "depth": depth, "us": paged * 1e6,
                       "contiguous_us": contiguous * 1e6}
                f.write(json.dumps(rec) + "\n")
                print(f"{a.set:5} attn  M={m:3} depth {depth:5}: paged {paged * 1e6:8.1f} us"
                      + (f", contiguous {contiguous * 1e6:8.1f} us" if contiguous else ""), flush=True)
    print("\nM      " + "  ".join(f"{n:>10}" for n in SETS[a.set]) + "   (default, us per node; sum)")
    for m in sorted({r["m"] for r in rows}):
        us = [next((r["us"] for r in rows if r["m"] == m and r["node"] == n and r["variant"] == "default"), 0.0)
              for n in SETS[a.set]]
        print(f"{m:<6} " + "  ".join(f"{u:10.1f}" for u in us) + f"   {sum(us):9.1f}")


if __name__ == "__main__":
    main()
