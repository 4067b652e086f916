"""Decode attention: GPU time per dispatch at real model shapes (attention_decode.wgsl), a sweep of the
split size, and a stress test of the cross-workgroup merge. ``--prefill``: the prefill kernel
(attention.wgsl) instead, a whole chunk per dispatch, the default tile beside ``--tiles``. (The kernels
both replaced, timed beside them here until stop 20, are in git history.)

    python3 dev/bench_attention.py [--positions 64,4160] [--configs 32:0,128:2:0:64]
                                       [--stress N] [--shapes qwen,llama8b] [--layers 16]
    python3 dev/bench_attention.py --prefill [--chunk 512] [--positions 0] [--tiles 16:4:4,16:1:4]

``--configs``: extra CHUNK:SLICES[:ROWS[:MAXS[:KB]]] points timed beside the default (0 = the default of that
knob; MAXS: the most splits per row block, the ``n_split`` attr; KB: keys per team pass). ``--layers N``: each
timed run walks N distinct K/V caches, as a decode step's layers do, so at long contexts the keys come from HBM (one
llama-1B layer's 4224-row cache, 8.7 MB, would otherwise stay in the 50 MB L2 across copies). The caches
are f16, as the models store them.

Timing as dev/bench_gemv.py: N copies of the dispatch(es) in one compute pass, GPU timestamps at the
pass ends, median of 3 (no submit or Python encode cost; every copy pays the dependent-dispatch gap a
decode step pays, since each writes the same output). Every timed kernel is first checked against
float64. ~0.5 s of GPU work runs first so the clocks are up. ``--stress N``: N submits at random
positions (each output checked, the counters checked zero) and passes of 64 copies with distinct
queries and outputs, per shape.
"""
from __future__ import annotations

import argparse
import json
import math
import os
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from oxigpu.backends import numpy_ops  # noqa: E402
from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.kernel import prepare, rel_error  # noqa: E402
from oxigpu.backends.wgpu.ops.attention import reference as attention_reference  # noqa: E402

SHAPES = {   # name: (n_head, n_head_kv, head_dim, window)
    "qwen": (14, 2, 64, 0),          # Qwen2.5-0.5B
    "llama1b": (32, 8, 64, 0),       # Llama-3.2-1B
    "llama8b": (32, 8, 128, 0),      # Llama-3.1-8B
    "gemma3": (4, 1, 256, 512),      # Gemma-3 270M sliding layers
}
N_CTX = 4224


def ref64(q, ck, cv, attrs, pos):
    f = lambda a: np.asarray(a, np.float64)   # noqa: E731
    tuning = ("n_split", "split_chunk", "key_slices", "decode_rows", "team_keys")
    a = {k: v for k, v in attrs.items() if k not in tuning}
    return numpy_ops.attention(f(q), f(ck), f(cv), **a, **numpy_ops.contiguous(pos, 1, len(ck)), n_tokens=1)


_TS: dict = {}


def gpu_time(dev: Device, d: list, n: int) -> float:
    """GPU seconds of one compute pass holding n copies of ``d``."""
    import wgpu
    if "qs" not in _TS:
        _TS["qs"] = dev.device.create_query_set(type="timestamp", count=2)
        _TS["buf"] = dev.device.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
    enc = dev.device.create_command_encoder()
    dev.encode(enc, list(d) * n, {"query_set": _TS["qs"], "beginning_of_pass_write_index": 0,
                                  "end_of_pass_write_index": 1})
    enc.resolve_query_set(_TS["qs"], 0, 2, _TS["buf"], 0)
    dev.queue.submit([enc.finish()])
    t = np.frombuffer(dev.queue.read_buffer(_TS["buf"]), np.uint64)
    return float(t[1] - t[0]) * 1e-9


def time_dispatches(dev: Device, d: list, warm: float = 0.03) -> float:
    """GPU seconds per run of ``d``: median of 3 passes of N copies (~3 ms each), after ``warm`` seconds of
    the same passes (the host work between cases lets an H100's clock sag within milliseconds)."""
    once = gpu_time(dev, d, 3) / 3
    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm:
        gpu_time(dev, d, int(min(2000, max(10, 0.005 / max(once, 1e-7)))))
    n = int(min(2000, max(10, 0.003 / max(once, 1e-7))))
    return max(float(np.median([gpu_time(dev, d, n) / n for _ in range(3)])), 1e-9)


def prefill_flops(H, D, T, pos, window):
    """2 FLOP per multiply-add of QK^T and PV over the (row, key) pairs the causal/window mask keeps."""
    keys = sum(min(pos + t + 1, window) if window else pos + t + 1 for t in range(T))
    return 2 * H * 2 * D * keys


def _params(pos: int, n_tokens: int, n_seqs: int = 1) -> Params:
    """Step parameters (trees before batched steps have no ``n_seqs``)."""
    try:
        return Params(pos=pos, n_tokens=n_tokens, n_seqs=n_seqs)
    except TypeError:
        return Params(pos=pos, n_tokens=n_tokens)


def prefill_bench(dev: Device, args, rows: list) -> None:
    """Each point of ``--tiles`` ("default", an NRG:RT:KT tile, "fma": the FMA kernel's default tile, "mma":
    the matrix-unit kernel) in each of ``--modes``: ``contig`` (no block table: the cache rows are the
    positions) and ``paged`` (one sequence through a scattered block table, the engine's single-stream
    form), every point checked against float64."""
    t_start = time.time()
    T = args.chunk
    blk = 32
    for shape in args.shapes.split(","):
        H, Hkv, D, window = SHAPES[shape]
        g = np.random.default_rng(1)
        for pos in (int(p) for p in args.positions.split(",")):
            if time.time() - t_start > args.budget:
                print("budget spent; stopping", flush=True)
                return
            n_ctx = pos + T
            q = g.standard_normal((T, H * D)).astype(np.float32)
            ck = (g.standard_normal((n_ctx, Hkv * D)) * 2).astype(np.float16)
            cv = g.standard_normal((n_ctx, Hkv * D)).astype(np.float16)
            attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=1 / math.sqrt(D),
                         window=window, softcap=0.0)
            want = attention_reference(q, ck, cv, **attrs, pos=pos, n_tokens=T)
            flops = prefill_flops(H, D, T, pos, window)
            mb = -(-n_ctx // blk)
            table = np.random.default_rng(2).permutation(2 * mb)[:mb].astype(np.int32)   # scattered blocks
            phys = (table[np.arange(n_ctx) // blk] * blk + np.arange(n_ctx) % blk)
            pk = np.zeros((2 * mb * blk, Hkv * D), np.float16)
            pv = np.zeros_like(pk)
            pk[phys], pv[phys] = ck, cv
            paged_in = [q, pk, pv, np.arange(pos, pos + T, dtype=np.int32), np.zeros(T, np.int32), table[None, :]]
            for mode in args.modes.split(","):
                line = [f"{shape:8s} T={T} pos={pos} {mode:6s}"]
                inputs = [q, ck, cv] if mode == "contig" else paged_in
                extra = {} if mode == "contig" else {"block_size": blk}
                for tile in ["default"] + [x for x in args.tiles.split(",") if x]:
                    knob = {"default": {}, "fma": {"prefill_mma": False}, "mma": {"prefill_mma": True}}.get(
                        tile, {"prefill_tile": tile})
                    try:
                        p = prepare("attention", inputs, dict(attrs, **extra, **knob), dev=dev)
                    except Exception as e:   # a tile this shape / device cannot take
                        line.append(f"{tile}: skipped ({str(e)[:80]})")
                        continue
                    dev.write_params(_params(pos, T))
                    dev.submit(p.dispatches)
                    err = rel_error(dev.read(p.out_bufs[0], np.float32, p.out_shapes[0]), want)
                    t = time_dispatches(dev, p.dispatches, 0.25)
                    name = f"{tile}={getattr(p.kernel.cfg, 'spec', p.kernel.cfg)}"
                    line.append(f"{name}: {t * 1e6:7.1f} us {flops / t * 1e-12:5.2f} TFLOP/s (err {err:.1e})")
                    rows.append({"prefill": shape, "T": T, "pos": pos, "mode": mode, "tile": name, "us": t * 1e6,
                                 "tflops": flops / t * 1e-12, "err": err})
                print(" | ".join(line), flush=True)


def make(shape: str, seed: int = 0):
    H, Hkv, D, window = SHAPES[shape]
    g = np.random.default_rng(seed)
    q = g.standard_normal((1, H * D)).astype(np.float32)
    ck = (g.standard_normal((N_CTX, Hkv * D)) * 2).astype(np.float16)
    cv = g.standard_normal((N_CTX, Hkv * D)).astype(np.float16)
    attrs = dict(n_head=H, n_head_kv=Hkv, head_dim=D, v_head_dim=D, scale=1 / math.sqrt(D), window=window,
                 softcap=0.0)
    return q, ck, cv, attrs


def warm_up(dev: Device) -> None:
    q, ck, cv, attrs = make("llama8b")
    p = prepare("attention", [q, ck, cv], attrs, dev=dev)
    dev.write_params(Params(pos=N_CTX - 1, n_tokens=1))
    t0, g = time.perf_counter(), 0.0
    while time.perf_counter() - t0 < 0.6:
        g += gpu_time(dev, p.dispatches, 200)
    print(f"warm-up: gpu {g * 1e3:.1f} ms, wall {(time.perf_counter() - t0) * 1e3:.1f} ms", flush=True)


def stress(dev: Device, shape: str, n: int, rows: list) -> None:
    q, ck, cv, attrs = make(shape, seed=7)
    p = prepare("attention", [q, ck, cv], attrs, dev=dev)
    kern = p.kernel
    g = np.random.default_rng(3)
    bad = 0
    t0 = time.perf_counter()
    positions = g.integers(0, N_CTX, n)
    for pos in positions:
        dev.write_params(Params(pos=int(pos), n_tokens=1))
        dev.write(p.out_bufs[0], np.full(p.out_shapes[0], np.nan, np.float32))
        dev.submit(p.dispatches)
        err = rel_error(dev.read(p.out_bufs[0], np.float32, p.out_shapes[0]), ref64(q, ck, cv, attrs, int(pos)))
        cnt = dev.read(kern.counters, np.uint32, kern.counters.size // 4)
        if err > 2e-5 or cnt.any():
            bad += 1
            print(f"  STRESS FAIL {shape} pos={pos} err={err:.3g} counters={cnt.tolist()}", flush=True)
    # passes of 64 copies with distinct queries and outputs, at a long and a short position
    qs = [g.standard_normal(q.shape).astype(np.float32) for _ in range(64)]
    qb = [dev.upload(x) for x in qs]
    outs = [dev.create_buffer(4 * int(np.prod(p.out_shapes[0]))) for _ in qs]
    ds = []
    for qq, oo in zip(qb, outs):
        ds += kern.encode([qq, p.in_bufs[1], p.in_bufs[2], oo])
    copies_bad = 0
    for pos in (N_CTX - 1, 3000, 700, 129):
        for rep in range(4):
            for oo in outs:
                dev.write(oo, np.full(p.out_shapes[0], np.nan, np.float32))
            dev.write_params(Params(pos=pos, n_tokens=1))
            dev.submit(ds)
            for i, oo in enumerate(outs):
                err = rel_error(dev.read(oo, np.float32, p.out_shapes[0]), ref64(qs[i], ck, cv, attrs, pos))
                if err > 2e-5:
                    copies_bad += 1
                    print(f"  STRESS FAIL {shape} copies pos={pos} rep={rep} copy={i} err={err:.3g}", flush=True)
    cnt = dev.read(kern.counters, np.uint32, kern.counters.size // 4)
    ok = bad == 0 and copies_bad == 0 and not cnt.any()
    print(f"stress {shape}: {n} submits, {bad} bad; 16 passes x 64 copies, {copies_bad} bad; counters "
          f"{cnt.tolist()} -> {'OK' if ok else 'FAIL'} ({time.perf_counter() - t0:.1f} s)", flush=True)
    rows.append({"stress": shape, "submits": n, "bad": bad, "copies_bad": copies_bad, "ok": ok})


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--shapes", default="qwen,llama8b,llama1b,gemma3")
    ap.add_argument("--positions", default="64,4160")
    ap.add_argument("--configs", default="", help="CHUNK:SLICES pairs to time besides the default")
    ap.add_argument("--stress", type=int, default=0)
    ap.add_argument("--layers", type=int, default=1, help="distinct K/V caches each timed run walks")
    ap.add_argument("--warm", type=float, default=0.03, help="seconds of warm passes before each timing")
    ap.add_argument("--budget", type=float, default=120.0)
    ap.add_argument("--prefill", action="store_true", help="time the prefill kernel (a chunk per dispatch)")
    ap.add_argument("--chunk", type=int, default=512, help="--prefill: chunk length T")
    ap.add_argument("--tiles", default="", help="--prefill: NRG:RT:KT tiles (or fma, mma) to time besides the default")
    ap.add_argument("--modes", default="contig,paged", help="--prefill: contig (no block table), paged (one sequence)")
    args = ap.parse_args()
    if args.prefill and args.positions == "64,4160":
        args.positions = "0"
    t_start = time.time()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], "subgroups:", dev.has_subgroups, flush=True)
    warm_up(dev)
    rows: list = []
    if args.prefill:
        prefill_bench(dev, args, rows)
        with open(Path(args.out) / "attention_bench.jsonl", "a") as f:
            for r in rows:
                f.write(json.dumps(r) + "\n")
        return
    configs = [(0, 0, 0, 0, 0)] + [tuple(int(v) for v in (c + ":0:0:0:0").split(":")[:5])
                                for c in args.configs.split(",") if c]
    for shape in args.shapes.split(","):
        q, ck, cv, attrs = make(shape)
        layers = [make(shape, seed=1 + i)[1:3] for i in range(args.layers - 1)]
        layers = [(dev.upload(k), dev.upload(v)) for k, v in layers]
        for pos in (int(p) for p in args.positions.split(",")):
            if time.time() - t_start > args.budget:
                print("budget spent; stopping", flush=True)
                break
            want = ref64(q, ck, cv, attrs, pos)
            dev.write_params(Params(pos=pos, n_tokens=1))
            line = [f"{shape:8s} pos={pos:5d}"]
            for chunk, slices, rws, maxs, kb in configs:
                knobs = {"split_chunk": chunk, "key_slices": slices, "decode_rows": rws, "n_split": maxs,
                         "team_keys": kb}
                a = dict(attrs, **{k: v for k, v in knobs.items() if v})
                try:
                    p = prepare("attention", [q, ck, cv], a, dev=dev)
                except ValueError as e:   # a sweep point the shape cannot take
                    line.append(f"({chunk}:{slices} skipped: {e})")
                    continue
                dev.submit(p.dispatches)
                err = rel_error(dev.read(p.out_bufs[0], np.float32, p.out_shapes[0]), want)
                ds = p.dispatches + [d for k, v in layers for d in p.kernel.encode([p.in_bufs[0], k, v, p.out_bufs[0]])]
                t = time_dispatches(dev, ds, args.warm) / len(ds)
                cfg = p.kernel.cfg
                kps, nact = cfg.splits(pos + 1 if not attrs["window"] else min(pos + 1, attrs["window"]))
                tag = f"chunk={cfg.CHUNK} ks={cfg.KS} R={cfg.R} kb={cfg.KB}"
                line.append(f"{tag}: {t * 1e6:6.2f} us ({nact} splits of {kps}, maxs {cfg.MAXS}, err {err:.1e})")
                rows.append({"shape": shape, "pos": pos, "kernel": "new", "chunk": cfg.CHUNK, "ks": cfg.KS,
                             "rows": cfg.R, "us": t * 1e6, "err": err, "nact": nact, "maxs": cfg.MAXS,
                             "layers": args.layers})
            print(" | ".join(line), flush=True)
    for shape in (args.shapes.split(",") if args.stress else []):
        stress(dev, shape, args.stress, rows)
    with open(Path(args.out) / "attention_bench.jsonl", "a") as f:
        for r in rows:
            f.write(json.dumps(r) + "\n")


if __name__ == "__main__":
    main()
