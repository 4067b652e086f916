"""GEMV sweep: GB/s of the decode matmul per weight type, shape and split (and the pre-rewrite kernel).

    python3 scripts/bench_gemv.py [--quick] [--out DIR] [--budget SECONDS] [--sweep NAME]

Each case uploads a weight of real shape (``distinct`` quantized rows tiled, so building it is cheap),
checks the output against float64, then times the dispatch: N copies in one compute pass, per-dispatch
time = GPU timestamps around a pass of N copies, median of 3 (no submit or Python encode cost; each
copy still pays the dependent-dispatch gap a real decode step pays). GB/s = (weight + x + y bytes) / time. Results: ``gemv_sweep.jsonl``
and a table on stdout.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import shutil
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends.wgpu.device import Device, Dispatch, workgroups_for  # noqa: E402
from oxigpu.backends.wgpu.kernel import prepare  # noqa: E402
from oxigpu.backends.wgpu.ops.matmul import gemv_config  # noqa: E402
from oxigpu.quant import dequantize, get_type, quantize  # noqa: E402

SHAPES = [(4096, 4096), (14336, 4096), (4096, 14336), (128256, 4096), (8192, 2048),
          (896, 896), (4864, 896), (896, 4864)]
"""(n rows, k cols): Llama-3.1-8B QKV/O, FFN up, FFN down, LM head; Llama-3.2-1B FFN up; Qwen2.5-0.5B."""

TYPES = ["F16", "Q8_0", "Q4_0", "Q5_0", "Q4_K", "Q6_K"]
LEGACY = {"Q8_0", "Q4_0", "Q5_0"}

SWEEPS = {
    "full": [dict(tpr=32, r=r, gpw=4) for r in (1, 2, 4, 8)]
            + [dict(tpr=64, r=4, gpw=2), dict(tpr=32, r=4, gpw=8), dict(tpr=32, r=4, gpw=4, magic=False)]
            + [dict(tpr=32, r=4, gpw=4, ppb32=pp, legacy=True) for pp in (1, 4)],
    "none": [],
}


def old_kernel(dev: Device, qt, k: int, n: int, x, w):
    """The kernel this rewrite replaced (WG 128, 4 rows per workgroup, 8-element chunks), for 'before'."""
    root = Path(__file__).resolve().parents[1] / "oxigpu" / "shaders"
    src = Path(__file__).resolve().parent / "bench_gemv_old.wgsl"
    shutil.copy(src, root / "_bench_old_gemv.wgsl")
    try:
        pipe = dev.pipeline("_bench_old_gemv.wgsl", defines={"QUANT": qt.name.lower(), "HAS_BIAS": False, "WG": 128,
                                                             "ROWS": 4, "REDUCE": "sg" if dev.has_subgroups else "wg"})
    finally:
        (root / "_bench_old_gemv.wgsl").unlink()
    y = dev.create_buffer(4 * n)
    row_bytes = qt.row_bytes(k)
    dims = dev.uniform([k, n, n, 0, row_bytes, 1, 0, 0])
    bg = dev.bind_group(pipe, {1: dims, 2: x, 3: w, 4: x, 5: y})
    return [Dispatch(pipe, bg, workgroups_for(-(-n // 4)))], y


_TS: dict = {}


def gpu_time(dev: Device, d: list, n: int) -> float:
    """GPU seconds of one compute pass holding n copies of ``d`` (timestamps at the pass ends)."""
    import wgpu
    if "qs" not in _TS:
        _TS["qs"] = dev.device.create_query_set(type="timestamp", count=2)
        _TS["buf"] = dev.device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    enc = dev.device.create_command_encoder()
    cp = enc.begin_compute_pass(timestamp_writes={"query_set": _TS["qs"], "beginning_of_pass_write_index": 0,
                                                  "end_of_pass_write_index": 1})
    for pipe, bg, wg in list(d) * n:
        cp.set_pipeline(pipe)
        cp.set_bind_group(0, bg)
        cp.dispatch_workgroups(*wg)
    cp.end()
    enc.resolve_query_set(_TS["qs"], 0, 2, _TS["buf"], 0)
    dev.queue.submit([enc.finish()])
    t = np.frombuffer(dev.queue.read_buffer(_TS["buf"]), np.uint64)
    return float(t[1] - t[0]) * 1e-9


def time_dispatches(dev: Device, d: list) -> float:
    """GPU seconds per run of ``d`` (each copy pays the dependent-dispatch gap, as in a decode step):
    median of 3 passes of N copies, N sized to ~3 ms; the submit and Python encode are not counted."""
    once = gpu_time(dev, d, 3) / 3
    n = int(min(1000, max(10, 0.003 / max(once, 1e-7))))
    return max(float(np.median([gpu_time(dev, d, n) / n for _ in range(3)])), 1e-9)


def warm_up(dev: Device) -> None:
    """~0.5 s of GEMVs so clocks are up before the first timed case; prints timestamp vs wall clock."""
    k, n = 4096, 16384
    xh = np.ones((1, k), np.float32)
    p = prepare("matmul", [xh, np.zeros((n, 2 * k), np.uint8)], {}, ["f32", "F16"], dev)
    t0 = time.perf_counter()
    g = sum(gpu_time(dev, p.dispatches, 200) for _ in range(3))
    print(f"warm-up: gpu {g * 1e3:.1f} ms, wall {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=150.0, help="stop starting new cases after this many s")
    ap.add_argument("--sweep", default="full", choices=sorted(SWEEPS))
    ap.add_argument("--types", default=",".join(TYPES))
    ap.add_argument("--shapes", default="", help="comma list of NxK (default: all)")
    ap.add_argument("--old", action=argparse.BooleanOptionalAction, default=True)
    args = ap.parse_args()
    t_start = time.time()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], flush=True)
    warm_up(dev)
    shapes = [tuple(int(v) for v in s.split("x")) for s in args.shapes.split(",")] if args.shapes else SHAPES
    out = open(Path(args.out) / "gemv_sweep.jsonl", "a")
    rows = []
    distinct = 64
    for (n, k) in shapes:
        for t in args.types.split(","):
            if time.time() - t_start > args.budget:
                print("budget reached; stopping", flush=True)
                break
            qt = get_type(t)
            if k % qt.block_size:
                continue        # e.g. K-quants at k = 896: real files use a 32-block type there
            rng = np.random.default_rng(n * 7 + k)
            raw = quantize(rng.standard_normal((distinct, k), np.float32), qt)
            xh = rng.standard_normal((1, k)).astype(np.float32)
            want = np.tile(xh.astype(np.float64) @ dequantize(raw, qt).astype(np.float64).T, (1, n // distinct + 1))[0, :n]
            big = np.tile(raw, (n // distinct + 1, 1))[:n]
            nbytes = big.nbytes + 4 * (k + n)
            variants = [("default", {})] + [(json.dumps(v, sort_keys=True), v) for v in SWEEPS[args.sweep]
                                            if not v.get("legacy") or t in LEGACY]
            # one upload of x and W, shared by every variant (prepare() would upload per variant)
            first = None
            for name, v in variants:
                v = {a: b for a, b in v.items() if a != "legacy"}
                try:
                    if first is None:
                        p = prepare("matmul", [xh, big], {"gemv": v} if v else {}, ["f32", t], dev)
                        first = p
                        xb, wb = p.in_bufs
                        yb = p.out_bufs[0]
                        disp = p.dispatches
                        cfg = p.kernel.gemv
                    else:
                        from oxigpu.backends.wgpu.ops.matmul import MatmulKernel
                        kern = MatmulKernel(dev, {"gemv": v}, [(1, k), (n, k)], ["f32", t], [(1, n)])
                        yb = dev.create_buffer(4 * n)
                        disp = kern.encode([xb, wb, yb])
                        cfg = kern.gemv
                    dev.submit(disp)
                    got = dev.read(yb, np.float32, n)
                    err = float(np.abs(got - want).max() / np.abs(want).max())
                    secs = time_dispatches(dev, disp)
                    rec = dict(type=t, n=n, k=k, variant=name, cfg=cfg.__dict__, us=secs * 1e6,
                               gbs=nbytes / secs / 1e9, err=err)
                except Exception as e:  # report and go on
                    rec = dict(type=t, n=n, k=k, variant=name, error=f"{type(e).__name__}: {e}"[:300])
                out.write(json.dumps(rec) + "\n")
                out.flush()
                rows.append(rec)
            if args.old and first is not None:
                try:
                    d, yo = old_kernel(dev, qt, k, n, first.in_bufs[0], first.in_bufs[1])
                    dev.submit(d)
                    got = dev.read(yo, np.float32, n)
                    err = float(np.abs(got - want).max() / np.abs(want).max())
                    secs = time_dispatches(dev, d)
                    rec = dict(type=t, n=n, k=k, variant="old", us=secs * 1e6, gbs=nbytes / secs / 1e9, err=err)
                except Exception as e:
                    rec = dict(type=t, n=n, k=k, variant="old", error=f"{type(e).__name__}: {e}"[:300])
                out.write(json.dumps(rec) + "\n")
                rows.append(rec)
            if first is not None:
                for b in first.in_bufs:
                    b.destroy()
            print(f"{t:5} {n}x{k} done at {time.time() - t_start:.0f}s", flush=True)
    # summary: old, default, best per (type, shape)
    print(f"\n{'type':5} {'n x k':>12} {'old GB/s':>9} {'def GB/s':>9} {'def us':>8} {'best GB/s':>9}  best variant")
    keys = sorted({(r['type'], r['n'], r['k']) for r in rows}, key=lambda a: (TYPES.index(a[0]) if a[0] in TYPES else 9, a[1] * a[2]))
    for key in keys:
        rs = [r for r in rows if (r['type'], r['n'], r['k']) == key and 'gbs' in r]
        bad = [r['variant'] for r in rows if (r['type'], r['n'], r['k']) == key and ('error' in r or r.get('err', 0) > 1e-4)]
        old = next((r for r in rs if r['variant'] == 'old'), None)
        dft = next((r for r in rs if r['variant'] == 'default'), None)
        new = [r for r in rs if r['variant'] != 'old']
        best = max(new, key=lambda r: r['gbs']) if new else None
        f = lambda r, kk: f"{r[kk]:9.1f}" if r else f"{'-':>9}"
        print(f"{key[0]:5} {key[1]:>6}x{key[2]:<5} {f(old, 'gbs')} {f(dft, 'gbs')} {f(dft, 'us')} {f(best, 'gbs')}  "
              f"{best['variant'] if best else ''}{'  BAD: ' + ','.join(bad) if bad else ''}")
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
