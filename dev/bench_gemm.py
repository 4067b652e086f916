"""Prefill GEMM sweep: TFLOP/s of the tiled GEMM per real prefill shape, weight type and tile variant.

    python3 dev/bench_gemm.py [--m 512] [--out DIR] [--budget SECONDS] [--shapes NAME,...]
        [--variants V,...] [--narrow V,...] [--splits 2,4] [--split-tiles T,...] [--rotate R] [--copies N]
        [--ablate no_wstore,no_xstore,no_fetch,no_mma,no_barrier]

Each case multiplies x [m, k] by a weight of real shape (``distinct`` quantized rows tiled, so building it
is cheap) with one variant: ``default`` (what ops/gemm.py picks on this adapter), ``f32`` / ``q8`` (its
choice for the f32 / the integer-dot kernel), ``mma`` / ``mma 2x4 t4 b32`` (the matrix-unit kernel where
``Device.has_mma``: Dawn on NVIDIA; its default, or SGM x SGN subgroups of 2 x 4 blocks, 32 k per step,
checked against x and weights in f16 with 1e-4 more slack; e.g. ``--variants q8,mma,"mma 2x2","mma 4x2"
--splits ""``), TileConfig overrides ("8x8/16 s2 L128": TM x TN per thread / BK, split-k 2, 128 loader
threads; "q8 8x4 L256 b2": the integer-dot kernel with 8 x 4 per thread, 256 loaders, 2 blocks of 32 per
step; unnamed fields as the default choice of that kernel has them), ``f16tiles`` (F16 weights in f16
tiles), ``glu`` (the shape's rows as gate rows then up rows, the model's matmul_glu with its epilogue,
checked against silu(g) u of the reference) or ``qkv`` / ``qkvplain`` (the model's matmul_multi: the rows
as q, k and v weights, 2/3, 1/6 and 1/6 of them back to back, three outputs; ``qkv`` with the RMS-norm
prologue, unit norm weights). ``--narrow`` variants and the split-k ones run only where
the unsplit 128x128 grid has fewer than 264 workgroups. (The kernels this sweep once compared against, the
64x128 GEMM of 854b7c9 and the tiled GEMM with parts switched off, are in git history before stop 20.)
It checks each output against float64 (max |err| / max |ref| <= 2e-7 sqrt(k); the integer-dot kernel
against x rounded as ops/gemm.py q8_round does, on x kept off rounding ties by q8_tie_free), then times
the dispatches (the integer-dot kernel's x pass included; ``xpass_us`` alone): after 0.25 s of the same
passes (clock warm-up: an H100 drops its clock within a fraction of a second of host work), N copies in
one compute pass between GPU timestamps, median of 3 passes, N sized to ~20 ms (``--rotate R``: the runs
of a pass cycle through R copies of the weights, so that they come from HBM). TFLOP/s = 2 m n k / time.
Results: ``gemm_sweep.jsonl`` and a table on stdout. The ``test.*`` shapes are small, for a lavapipe run
(``--m 70 --shapes test.q4k,test.f16``).
"""
from __future__ import annotations

import argparse
import json
import math
import os
import re
import sys
import time
from pathlib import Path

import numpy as np

sys.path.insert(0, str(Path(__file__).resolve().parents[1]))

from ablation import ablate, drop  # noqa: E402

from oxigpu.backends.wgpu.device import Device, Params  # noqa: E402
from oxigpu.backends.wgpu.layout import gpu_layout  # noqa: E402
from oxigpu.backends.wgpu.ops.gemm import Q8_TYPES, half_dequant, q8_round, q8_tie_free, tile_config  # noqa: E402
from oxigpu.backends.wgpu.ops.matmul import NORM_EPS, MatmulGluKernel, MatmulKernel, MatmulMultiKernel, glu64  # noqa: E402
from oxigpu.quant import dequantize, get_type, quantize  # noqa: E402

SHAPES = {   # name: (n, k, weight type) of one prefill GEMM (q/k/v and gate/up joined as the backend runs them)
    "llama8b.qkv": (6144, 4096, "Q4_K"), "llama8b.o": (4096, 4096, "Q4_K"),
    "llama8b.gateup": (28672, 4096, "Q4_K"), "llama8b.down": (4096, 14336, "Q6_K"),
    "qwen0.5b.qkv": (1152, 896, "Q5_0"), "qwen0.5b.o": (896, 896, "Q5_0"),
    "qwen0.5b.gateup": (9728, 896, "Q5_0"), "qwen0.5b.down": (896, 4864, "Q4_K"),
    "llama1b.qkv": (3072, 2048, "Q4_K"), "llama1b.o": (2048, 2048, "Q4_K"),
    "llama1b.gateup": (16384, 2048, "Q4_K"), "llama1b.down": (2048, 8192, "Q6_K"),
    "llama8b.o.f16": (4096, 4096, "F16"), "llama8b.o.q8": (4096, 4096, "Q8_0"),
    "qwen0.5b.down6": (896, 4864, "Q6_K"), "llama8b.o.q40": (4096, 4096, "Q4_0"), "llama8b.v": (1024, 4096, "Q6_K"),
    "llama8b.qkv.f16": (6144, 4096, "F16"), "llama8b.gateup.f16": (28672, 4096, "F16"),
    "llama8b.down.f16": (4096, 14336, "F16"),
    "llama1b.qkv.f16": (3072, 2048, "F16"), "llama1b.o.f16": (2048, 2048, "F16"),
    "llama1b.gateup.f16": (16384, 2048, "F16"), "llama1b.down.f16": (2048, 8192, "F16"),
    "llama8b.qkv.q8": (6144, 4096, "Q8_0"), "llama8b.gateup.q8": (28672, 4096, "Q8_0"),
    "llama8b.down.q8": (4096, 14336, "Q8_0"),
    "test.q4k": (200, 512, "Q4_K"), "test.f16": (200, 512, "F16"),
}

TILES = ["8x8/16", "8x4/16", "4x8/16", "4x4/16", "4x4/32"]


def parse_variant(v: str) -> dict | None:
    """'8x4/16 s2 L128' -> TileConfig fields (split-k 2, 128 loader threads); 'q8 8x4 L256 b2' -> the
    integer-dot kernel's (2 blocks per step); 'default' -> {}; 'f32' / 'q8' -> that kernel's default
    choice; 'mma' / 'mma 2x4 t4 b32 s2 f4' -> the matrix-unit kernel (where Device.has_mma), its default
    or SGM x SGN subgroups of FM (default 2) x TNB blocks, BK, split-k (w1: weights staged transposed,
    TileConfig.wt; r1: Q8_0 / Q5_0 / Q4_0 read as 16-byte words, TileConfig.raw16); 'f16tiles' -> default
    with F16 weights in f16 tiles."""
    if v == "default":
        return {}
    if v in ("f32", "q8"):
        return {"q8": v == "q8"}
    if v.startswith("mma"):   # 'mma', 'mma 2x4 t4 b32': the matrix-unit kernel, SGM x SGN subgroups, TNB, BK
        out, sg = {"mma": True}, None
        for a in v.split()[1:]:
            if a[0] in "btsfwr":
                key = {"b": "bk", "t": "sn", "s": "splits", "f": "fm", "w": "wt", "r": "raw16"}[a[0]]
                out[key] = bool(int(a[1:])) if key in ("wt", "raw16") else int(a[1:])
            else:
                sg = [int(i) for i in a.split("x")]
        if sg:
            out |= {"tm": out.get("fm", 2) * sg[0], "tn": out.get("sn", 2) * sg[1]}
        return out
    if v == "f16tiles":
        return {"f16": True}
    tile, *rest = v.split()
    out = {}
    if tile == "q8":
        out["q8"] = True
        tile, *rest = rest
    tm, tn = (int(a) for a in tile.split("/")[0].split("x"))
    out |= {"tm": tm, "tn": tn}
    if "/" in tile:
        out["bk"] = int(tile.split("/")[1])
    for r in rest:
        if r.startswith("s"):
            out["splits"] = int(r[1:])
        if r.startswith("L"):
            out["loaders"] = int(r[1:])
        if r.startswith("b"):
            out["nb"] = int(r[1:])
    return out


_TS: dict = {}


def gpu_time(dev: Device, d: list, n: int) -> float:
    """GPU seconds of one compute pass holding n copies of ``d`` (timestamps at the pass ends)."""
    if "qs" not in _TS:
        usage = dev._wgpu.BufferUsage.QUERY_RESOLVE | dev._wgpu.BufferUsage.COPY_SRC
        _TS["qs"] = dev.device.create_query_set(type="timestamp", count=2)
        _TS["buf"] = dev.device.create_buffer(size=16, usage=usage)
    enc = dev.device.create_command_encoder()
    dev.encode(enc, list(d) * n, {"query_set": _TS["qs"], "beginning_of_pass_write_index": 0,
                                  "end_of_pass_write_index": 1})
    enc.resolve_query_set(_TS["qs"], 0, 2, _TS["buf"], 0)
    dev.queue.submit([enc.finish()])
    t = np.frombuffer(dev.queue.read_buffer(_TS["buf"]), np.uint64)
    return float(t[1] - t[0]) * 1e-9


COPIES = 0   # --copies


def time_dispatches(dev: Device, d: list) -> float:
    """GPU seconds per run of ``d``: after WARM_CASE_S of the same passes (the H100's clock drops within
    a fraction of a second of host-side work between cases), median of 3 passes of N copies (~20 ms). With
    ``--copies N``: the median of ~20 ms of passes of N copies each, all in one submit (``Device.time_passes``;
    1: each run in its own pass, as the model's per-node profile times a node)."""
    once = gpu_time(dev, d, 1)
    n = int(min(50, max(2, 0.02 / max(once, 1e-7))))
    t_end = time.perf_counter() + float(os.environ.get("WARM_CASE_S", "0.25"))
    while time.perf_counter() < t_end:
        gpu_time(dev, d, n)
    if COPIES:
        passes = int(min(200, max(5, 0.02 / max(once * COPIES, 1e-7))))
        return max(float(np.median(dev.time_passes([list(d) * COPIES] * passes))) / COPIES, 1e-9)
    return max(float(np.median([gpu_time(dev, d, n) / n for _ in range(3)])), 1e-9)


def warm_up(dev: Device) -> None:
    """~1 s of GEMMs so the clock is up before the first timed case (an idle H100 sits at ~345 MHz)."""
    m, k, n = (512, 4096, 4096) if not dev.is_software else (64, 256, 256)
    xh = np.ones((m, k), np.float32)
    kern = MatmulKernel(dev, {}, [(m, k), (n, k)], ["f32", "F16"], [(m, n)])
    xb, wb, yb = dev.upload(xh), dev.upload(np.zeros((n, 2 * k), np.uint8)), dev.create_buffer(4 * m * n)
    d = kern.encode([xb, wb, yb])
    t0 = time.perf_counter()
    g = 0.0
    while time.perf_counter() - t0 < float(os.environ.get("WARM_S", "1.0")):
        g += gpu_time(dev, d, 10)
    print(f"warm-up: gpu {g * 1e3:.0f} ms in {(time.perf_counter() - t0) * 1e3:.0f} ms wall", flush=True)


ABLATIONS = {   # edits of the expanded gemm_mma.wgsl source (every weight type's staging writes `ws[...] =`)
    "no_wstore": r"^\s*ws\[o",                                    # the f16 weight staging stores
    "no_xstore": r"^\s*xs\[o\] = ",                              # the f16 x staging stores
    "no_fetch": r"if \(k0 \+ BK < kr\.y\) \{ fetch\(",            # every global load but the first step's
    "no_mma": r"c\d\d = subgroupMatrixMultiplyAccumulate",          # the products
    "no_barrier": r"^\s*workgroupBarrier\(\);\s*$",               # the main loop's and epilogue's barriers
}
"""Where the matrix-unit GEMM's time goes (``--ablate``): lines of the kernel matching the pattern are
dropped, as dev/ablate_attention_mma.py does for the prefill attention."""


def _buffer_view(src: str) -> str:
    """xs and ws as WGSL ``buffer``s (language feature buffer_view): staged a 32-bit word a store where the
    word is at hand (x; F16 weights) instead of two 16-bit stores, read by the matrix loads through f16
    views. The same results: checked as the unablated kernel is."""
    c = {k: int(v) for k, v in re.findall(r"const (SGM|SGN|FM|TNB|BK): u32 = (\d+)u;", src)}
    bm, ld = 16 * c["FM"] * c["SGM"], c["BK"] + 8
    wslen = int(re.search(r"var<workgroup> ws: array<f16, (\d+)>;", src)[1])
    xv, wv = f"bufferView<array<f16, {bm * ld}>>(&xsb, 0)", f"bufferView<array<f16, {wslen}>>(&wsb, 0)"
    src = src.replace("enable chromium_experimental_subgroup_matrix;",
                      "enable chromium_experimental_subgroup_matrix;\nrequires buffer_view;")
    src = src.replace("var<workgroup> xs: array<f16, BM * LD>;", f"var<workgroup> xsb: buffer<{2 * bm * ld}>;")
    src = re.sub(r"var<workgroup> ws: array<f16, \d+>;", f"var<workgroup> wsb: buffer<{2 * wslen}>;", src)
    src = src.replace("let h = bitcast<vec2<f16>>(xr[i]);\n    xs[o] = h.x; xs[o + 1u] = h.y;",
                      f"(*bufferView<array<u32, {bm * ld // 2}>>(&xsb, 0))[o / 2u] = xr[i];")
    src = src.replace("let h = h2(b);\n  ws[o] = h.x;\n  ws[o + 1u] = h.y;",
                      f"(*bufferView<array<u32, {wslen // 2}>>(&wsb, 0))[o / 2u] = b;")
    src = src.replace("(&xs,", f"({xv},").replace("(&ws,", f"({wv},")
    return re.sub(r"\bws\[", f"(*{wv})[", re.sub(r"\bxs\[", f"(*{xv})[", src))


EDITS = {"bufview": _buffer_view}
"""Exact rewrites timed as ``--ablate`` entries (their results checked)."""


def main() -> None:
    ap = argparse.ArgumentParser()
    ap.add_argument("--out", default=os.environ.get("OUT", "."))
    ap.add_argument("--budget", type=float, default=150.0, help="stop starting new shapes after this many s")
    ap.add_argument("--m", type=int, default=512)
    ap.add_argument("--shapes", default=",".join(SHAPES))
    ap.add_argument("--variants", default="default," + ",".join(TILES),
                    help="comma list; each shape also gets split-k variants where --splits says")
    ap.add_argument("--splits", default="2,4", help="split-k counts tried with --split-tiles where the unsplit "
                                                      "8x8 grid has < 264 workgroups")
    ap.add_argument("--split-tiles", default="8x8/16,8x4/16,4x4/32")
    ap.add_argument("--narrow", default="", help="comma list of variants tried only where the 8x8 grid has "
                                                 "< 264 workgroups")
    ap.add_argument("--copies", type=int, default=0,
                    help="copies of the dispatches per timed pass (default: as many as fill ~20 ms; 1: one "
                         "per pass, as the model's per-node profile runs them)")
    ap.add_argument("--ablate", default="", help="comma list of ABLATIONS: each variant also timed with one part "
                    "of the matrix-unit kernel taken out (results wrong on purpose; --variants mma ...)")
    ap.add_argument("--rotate", type=int, default=1,
                    help="weight copies the timed passes cycle through (the engine's kernels only): with R x "
                         "the weight bytes past the H100's 50 MB L2 every run reads its weights from HBM, as "
                         "a model's layers do, instead of from L2 as N copies of one run do")
    args = ap.parse_args()
    global COPIES
    COPIES = args.copies
    t_start = time.time()
    dev = Device.get()
    print("device:", dev.info()["name"], dev.info()["backend"], flush=True)
    dev.write_params(Params(pos=0, n_tokens=args.m))   # row tiles at or past n_tokens would exit at once
    warm_up(dev)
    Path(args.out).mkdir(parents=True, exist_ok=True)
    out = open(Path(args.out) / "gemm_sweep.jsonl", "a")
    rows = []
    m = args.m
    distinct = 32
    plain = dev.shader_source   # before any ablation: every shape's runs edit this one
    for name in args.shapes.split(","):
        if time.time() - t_start > args.budget:
            print("budget reached; stopping", flush=True)
            break
        n, k, t = SHAPES[name]
        qt = get_type(t)
        rng = np.random.default_rng(n * 7 + k)
        raw = quantize(rng.standard_normal((distinct, k), np.float32), qt)
        xh = q8_tie_free(rng.standard_normal((m, k)).astype(np.float32))
        wd = dequantize(raw, qt).astype(np.float64).T
        # float64 references: x as given (f32 kernel), as the integer-dot kernel rounds it, and x and the
        # weights in f16 (the matrix-unit kernel)
        f16 = lambda a: a.astype(np.float16).astype(np.float64)
        ref = lambda x, w, n=n: np.tile(x @ w, (1, n // distinct + 1))[:, :n]
        wants = {"f32": ref(xh.astype(np.float64), wd), "mma": ref(f16(xh), f16(wd))}
        if t in ("Q4_K", "Q6_K"):   # the matrix-unit kernel's weights dequantized in f16 arithmetic (cfg.half)
            wants["mmah"] = ref(f16(xh), half_dequant(raw, t).reshape(distinct, k).T)
        if t in Q8_TYPES:
            wants["q8"] = ref(q8_round(xh), wd)
        big = np.tile(raw, (n // distinct + 1, 1))[:n]
        wbs = [dev.upload(gpu_layout(big.reshape(-1).view(np.uint8), t)) for _ in range(max(1, args.rotate))]
        xb = dev.upload(xh)
        flops = 2 * m * n * k
        tol = 2e-7 * math.sqrt(k)
        variants = args.variants.split(",")
        if -(-n // 128) * -(-m // 128) < 264:
            variants += [v for v in args.narrow.split(",") if v]
            if args.splits:
                variants += [f"{tile} s{s}" for tile in args.split_tiles.split(",") for s in args.splits.split(",")]
        if t == "F16":
            variants.append("f16tiles")
        runs_of = [(v, a) for v in variants for a in ["", *filter(None, args.ablate.split(","))]]
        for v, abl in runs_of:
            ablate(dev, plain, "gemm_mma.wgsl", abl or "full",
                   (EDITS[abl] if abl in EDITS else drop(ABLATIONS[abl])) if abl else None)
            try:
                if v == "glu":    # the model's gate+up: n / 2 gate rows then n / 2 up rows, the GLU epilogue
                    half = n // 2 * qt.row_bytes(k)
                    kern = MatmulGluKernel(dev, {"act": "silu"}, [(m, k), (n // 2, k), (n // 2, k)], ["f32", t, t],
                                           [(m, n // 2)])
                    yb = dev.create_buffer(4 * m * n // 2)
                    runs = [kern.encode([xb, (w, 0, half), (w, half, half), yb]) for w in wbs]
                    cfg = "glu"
                elif v in ("qkv", "qkvplain"):   # the model's q/k/v: 2/3, 1/6, 1/6 of the rows back to back, 3 outputs
                    ns = [n * 2 // 3, n // 6, n - n * 2 // 3 - n // 6]
                    o = [sum(ns[:i]) for i in range(3)]
                    rb, norm = qt.row_bytes(k), v == "qkv"     # qkv: with the RMS-norm prologue (weights 1)
                    kern = MatmulMultiKernel(dev, {"n_w": 3, **({"norm_eps": NORM_EPS} if norm else {})},
                                             [(m, k), *((r, k) for r in ns), *([(k,)] if norm else [])],
                                             ["f32", t, t, t, *(["f32"] if norm else [])], [(m, r) for r in ns])
                    al = dev.storage_align       # each output at an aligned offset of one buffer, as the arena
                    oy = [sum(-(-4 * m * r // al) * al for r in ns[:i]) for i in range(3)]
                    yb = dev.create_buffer(oy[-1] + 4 * m * ns[-1])
                    nwb = [dev.upload(np.ones(k, np.float32))] if norm else []
                    runs = [kern.encode([xb, *((w, oi * rb, r * rb) for oi, r in zip(o, ns)), *nwb,
                                         *((yb, yi, 4 * m * r) for yi, r in zip(oy, ns))]) for w in wbs]
                    cfg = v
                else:
                    over = parse_variant(v)
                    kern = MatmulKernel(dev, {"gemm": over}, [(m, k), (n, k)], ["f32", t], [(m, n)])
                    yb = dev.create_buffer(4 * m * n)
                    runs = [kern.encode([xb, w, yb]) for w in wbs]
                    c = kern.gemm.gemm.cfg
                    cfg = (f"mma {c.tm // 2}x{c.tn // c.sn} t{c.sn} b{c.bk} s{c.splits}" if c.mma
                           else f"q8 {c.tm}x{c.tn} b{c.nb}" if c.q8
                           else f"{c.tm}x{c.tn}/{c.bk}") + f" s{c.splits} L{c.loaders}"
                d = runs[0]
                dev.submit(d)
                if v == "glu":
                    w2 = wants["mma" if dev.has_mma else "f32"]
                    want = glu64(w2[:, :n // 2], w2[:, n // 2:], "silu")
                    got, kind = dev.read(yb, np.float32, (m, n // 2)), "mma"
                elif v in ("qkv", "qkvplain"):
                    got = np.concatenate([dev.read(yb, np.float32, (m, r), yi) for yi, r in zip(oy, ns)], axis=1)
                    xn = xh.astype(np.float64)
                    if v == "qkv":
                        xn = xn / np.sqrt((xn * xn).mean(axis=1, keepdims=True) + NORM_EPS)
                    kind = "mma" if dev.has_mma else "f32"
                    want = ref(f16(xn), f16(wd)) if dev.has_mma else ref(xn, wd)
                else:
                    got = dev.read(yb, np.float32, (m, n))
                    kind = cfg.split()[0] if cfg.split()[0] in wants else "f32"
                    kind = "mmah" if kind == "mma" and c.half else kind
                    want = wants[kind]
                err = float(np.abs(got - want).max() / np.abs(want).max())
                secs = time_dispatches(dev, [x for r in runs for x in r]) / len(runs)
                rec = dict(shape=name, type=t, m=m, n=n, k=k, variant=v + (f" [{abl}]" if abl else ""), cfg=cfg,
                           us=secs * 1e6, rotate=len(runs), tflops=flops / secs / 1e12, err=err,
                           # ablated: wrong by design
                           ok=err <= tol + (1e-4 if kind.startswith("mma") else 0) or abl in ABLATIONS)
                if cfg.startswith(("q8", "mma")):
                    rec["xpass_us"] = time_dispatches(dev, d[:1]) * 1e6
                yb.destroy()
            except Exception as e:  # report and go on (the compiler's words come last)
                rec = dict(shape=name, type=t, m=m, n=n, k=k, variant=v, error=f"{type(e).__name__}: {e}"[-1500:])
            out.write(json.dumps(rec) + "\n")
            out.flush()
            rows.append(rec)
        xb.destroy()
        for w in wbs:
            w.destroy()
        print(f"{name:16} {t:5} {n}x{k} done at {time.time() - t_start:.0f}s", flush=True)
    print(f"\n{'shape':16} {'type':5} {'n x k':>11} {'default':>8} {'best':>6}  best variant (TFLOP/s; "
          f"default = {tile_config.__name__})")
    for name in dict.fromkeys(r["shape"] for r in rows):
        rs = [r for r in rows if r["shape"] == name and "tflops" in r]
        bad = [r["variant"] for r in rows if r["shape"] == name and ("error" in r or not r.get("ok"))]
        get = lambda v, rs=rs: next((f"{r['tflops']:.2f}" for r in rs if r["variant"] == v), "-")
        whole = [r for r in rs if "[" not in r["variant"]]     # ablated runs are not candidates
        best = max(whole, key=lambda r: r["tflops"]) if whole else None
        r0 = rows[[r["shape"] for r in rows].index(name)]
        print(f"{name:16} {r0['type']:5} {r0['n']:>5}x{r0['k']:<5} {get('default'):>8} "
              f"{best['tflops'] if best else 0:6.2f}  {best['variant'] if best else ''}"
              f"{'  BAD: ' + ', '.join(bad) if bad else ''}")
        print("    " + "  ".join(f"{r['variant']}: {r['tflops']:.2f}" for r in rs))
    print(f"total {time.time() - t_start:.0f}s")


if __name__ == "__main__":
    main()
