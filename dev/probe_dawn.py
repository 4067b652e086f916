"""Can WGSL reach the H100's tensor cores through Dawn? (wgpudawn: the wgpu-py API on Google's Dawn.)

wgpu-native 29 refuses its cooperative-matrix extension (dev/probe_coop_matrix.py). Dawn has
``chromium-experimental-subgroup-matrix`` (behind its ``allow_unsafe_apis`` toggle), lowered to
VK_KHR_cooperative_matrix on Vulkan. Measured results: docs/perf-log.md, "Tensor cores through Dawn".

    python3 dev/probe_dawn.py              # features, subgroup-matrix configurations, one multiply of
                                               # each checked against float64, GEMMs straight from storage
    python3 dev/probe_dawn.py --tiled      # int8 GEMM staged in workgroup memory, with llama.cpp's
                                               # per-32 scales (the result leaves the matrix per block)
    python3 dev/probe_dawn.py --f16-tiled  # f16 GEMM staged in workgroup memory (needs the toggle below)
    DAWN_TOGGLES=vulkan_enable_f16_on_nvidia python3 dev/probe_dawn.py   # f16 on NVIDIA (off by default)

Needs wgpudawn importable (on the GPU machine: ``bash ../shared/gpu/prepare.sh wgpudawn``).
"""
from __future__ import annotations

import os
import sys
import time

import numpy as np


def instance():
    import wgpudawn
    from wgpudawn.backends.dawn import extras
    extra = os.environ.get("DAWN_TOGGLES")
    toggles = ["allow_unsafe_apis"] + (extra.split(",") if extra else [])
    extras.set_instance_extras(backends=["Vulkan"], enable_toggles=toggles)
    return wgpudawn, extras


def mma_device(wgpu):
    """The high-performance adapter's device with f16, subgroups, timestamps and subgroup matrices."""
    ad = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    return ad.request_device_sync(required_features=["shader-f16", "subgroups", "timestamp-query",
                                                     "chromium-experimental-subgroup-matrix"])


def pipeline(dev, src: str, label: str):
    """The compute pipeline of ``src`` (entry ``main``), or None after printing the compiler's errors."""
    try:
        mod = dev.create_shader_module(code=src)
        return dev.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
    except Exception as e:
        msg = [ln for ln in str(e).splitlines() if "error" in ln.lower()] or [str(e)]
        print(f"[{label}] compile FAILED: {' | '.join(' '.join(m.split()) for m in msg)[:1200]}")
        return None


def bind(wgpu, dev, pipe, arrays):
    """Storage buffers holding ``arrays``, bound in order from binding 0."""
    usage = wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC | wgpu.BufferUsage.COPY_DST
    bufs = [dev.create_buffer_with_data(data=np.ascontiguousarray(x).tobytes(), usage=usage) for x in arrays]
    bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0),
                               entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(bufs)])
    return bufs, bg


def run_once(dev, pipe, bg, groups) -> None:
    """One dispatch of ``pipe`` over ``groups`` workgroups, submitted (its results then readable)."""
    enc = dev.create_command_encoder()
    p = enc.begin_compute_pass()
    p.set_pipeline(pipe)
    p.set_bind_group(0, bg)
    p.dispatch_workgroups(*groups)
    p.end()
    dev.queue.submit([enc.finish()])


def gpu_time(wgpu, dev, pipe, bg, groups, reps: int = 10, warm_s: float = 0.4) -> float:
    """Seconds per dispatch: ``warm_s`` of the same work first (an idle H100 clocks down), then the median
    of 3 passes of ``reps`` dispatches between timestamps."""
    qs = dev.create_query_set(type="timestamp", count=2)
    qb = dev.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)

    def one(stamp: bool) -> None:
        enc = dev.create_command_encoder()
        tw = {"query_set": qs, "beginning_of_pass_write_index": 0, "end_of_pass_write_index": 1}
        p = enc.begin_compute_pass(timestamp_writes=tw) if stamp else enc.begin_compute_pass()
        p.set_pipeline(pipe)
        p.set_bind_group(0, bg)
        for _ in range(reps):
            p.dispatch_workgroups(*groups)
        p.end()
        if stamp:
            enc.resolve_query_set(qs, 0, 2, qb, 0)
        dev.queue.submit([enc.finish()])

    t0 = time.perf_counter()
    while time.perf_counter() - t0 < warm_s:
        one(False)
        dev.queue.read_buffer(qb)
    ts = []
    for _ in range(3):
        one(True)
        t = np.frombuffer(dev.queue.read_buffer(qb), np.uint64).astype(np.int64)
        ts.append((t[1] - t[0]) * 1e-9 / reps)
    return float(np.median(ts))


def probe() -> None:
    wgpu, extras = instance()
    ad = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    print("adapter", ad.info["device"], ad.info["backend_type"], ad.info.get("description"))
    feats = sorted(ad.features)
    print("features", feats)
    props = extras.get_adapter_properties(ad)
    configs = props.get("subgroup_matrix_configs", [])
    for c in configs:
        print("config", c)
    lim = dict(ad.limits)
    print("limits: storage binding", lim["max-storage-buffer-binding-size"], "buffer", lim["max-buffer-size"],
          "wg storage", lim["max-compute-workgroup-storage-size"], "invocations",
          lim["max-compute-invocations-per-workgroup"])
    for name, t in extras.all_toggles().items():
        if "16" in name or "subgroup" in name or "validation" in name or "robust" in name:
            print("toggle", name, t["stage"], t["description"][:160])
    print("adapter toggles", extras.get_toggles(ad))
    want = [f for f in ("shader-f16", "subgroups", "timestamp-query", "chromium-experimental-subgroup-matrix")
            if f in feats]
    dev = ad.request_device_sync(required_features=want)
    print("device features", sorted(dev.features))
    if "chromium-experimental-subgroup-matrix" not in dev.features:
        print("NO SUBGROUP MATRIX")
        return
    rng = np.random.default_rng(0)
    # 1. one multiply per configuration: C (M x N) = A (M x K) B (K x N), all row-major
    for c in configs:
        et, rt, M, N, K = c["component_type"], c["result_component_type"], c["m"], c["n"], c["k"]
        if et not in ("f16", "i8"):
            continue
        if et == "f16":
            a = rng.standard_normal((M, K)).astype(np.float16)
            b = rng.standard_normal((K, N)).astype(np.float16)
            arr, aw, bw, stride_a, stride_b = "f16", a, b, K, N
        else:
            a = rng.integers(-127, 128, (M, K), dtype=np.int8)
            b = rng.integers(-127, 128, (K, N), dtype=np.int8)
            arr, aw, bw, stride_a, stride_b = "i32", a.view(np.int32), b.view(np.int32), K, N
        outt = {"f32": ("f32", np.float32), "f16": ("f16", np.float16), "i32": ("i32", np.int32)}[rt]
        src = f"""enable chromium_experimental_subgroup_matrix;
{'enable f16;' if et == 'f16' else ''}
@group(0) @binding(0) var<storage, read_write> A: array<{arr}>;
@group(0) @binding(1) var<storage, read_write> B: array<{arr}>;
@group(0) @binding(2) var<storage, read_write> C: array<{outt[0]}>;
@compute @workgroup_size({c['max_subgroup_size']})
fn main() {{
  let a = subgroupMatrixLoad<subgroup_matrix_left<{et}, {K}, {M}>>(&A, 0u, false, {stride_a}u);
  let b = subgroupMatrixLoad<subgroup_matrix_right<{et}, {N}, {K}>>(&B, 0u, false, {stride_b}u);
  let r = subgroupMatrixMultiply<{rt}>(a, b);
  subgroupMatrixStore(&C, 0u, r, false, {N}u);
}}"""
        label = f"{et}->{rt} {M}x{N}x{K}"
        pipe = pipeline(dev, src, label)
        if pipe is None:
            continue
        bufs, bg = bind(wgpu, dev, pipe, [aw, bw, np.zeros(M * N, outt[1])])
        run_once(dev, pipe, bg, (1,))
        r = np.frombuffer(dev.queue.read_buffer(bufs[2]), outt[1]).reshape(M, N).astype(np.float64)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        print(f"[{label}] max err {np.abs(r - ref).max():.3g} (|ref| max {np.abs(ref).max():.3g})")

    # 2. GEMM throughput, C[M,N] = X[M,K] W[N,K]^T: each subgroup TMxTN of 16x16 (or the config's) tiles,
    # straight from storage (L1/L2), W loaded column-major (its rows are the right matrix's columns)
    for c in configs:
        et, rt, m, n, k = c["component_type"], c["result_component_type"], c["m"], c["n"], c["k"]
        if (et, rt) not in (("f16", "f32"), ("i8", "i32")):
            continue
        M, N, K = 512, 4096, 4096
        for TM, TN in ((2, 2), (2, 4), (4, 2), (4, 4)):
            sg = c["max_subgroup_size"]
            arr = "f16" if et == "f16" else "i32"
            decl = "\n".join(f"  var c{i}{j}: subgroup_matrix_result<{rt}, {n}, {m}>;"
                             for i in range(TM) for j in range(TN))
            loads = "\n".join(
                f"    let a{i} = subgroupMatrixLoad<subgroup_matrix_left<{et}, {k}, {m}>>(&X, (m0 + {i * m}u) * {K}u + kk, false, {K}u);"
                for i in range(TM)) + "\n" + "\n".join(
                f"    let b{j} = subgroupMatrixLoad<subgroup_matrix_right<{et}, {n}, {k}>>(&W, (n0 + {j * n}u) * {K}u + kk, true, {K}u);"
                for j in range(TN))
            fma = "\n".join(f"    c{i}{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, c{i}{j});"
                            for i in range(TM) for j in range(TN))
            stores = "\n".join(f"  subgroupMatrixStore(&C, (m0 + {i * m}u) * {N}u + n0 + {j * n}u, c{i}{j}, false, {N}u);"
                               for i in range(TM) for j in range(TN))
            src = f"""enable chromium_experimental_subgroup_matrix;
{'enable f16;' if et == 'f16' else ''}
@group(0) @binding(0) var<storage, read> X: array<{arr}>;
@group(0) @binding(1) var<storage, read> W: array<{arr}>;
@group(0) @binding(2) var<storage, read_write> C: array<{'f32' if rt == 'f32' else 'i32'}>;
@compute @workgroup_size({sg})
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
  let m0 = wid.y * {TM * m}u;
  let n0 = wid.x * {TN * n}u;
{decl}
  for (var kk = 0u; kk < {K}u; kk += {k}u) {{
{loads}
{fma}
  }}
{stores}
}}"""
            label = f"gemm {et} {M}x{N}x{K} tiles {TM}x{TN} of {m}x{n}x{k}"
            pipe = pipeline(dev, src, label)
            if pipe is None:
                continue
            if et == "f16":
                x = (rng.standard_normal((M, K)) * 0.1).astype(np.float16)
                w = (rng.standard_normal((N, K)) * 0.1).astype(np.float16)
                xa, wa, cz = x, w, np.zeros(M * N, np.float32)
            else:
                x = rng.integers(-127, 128, (M, K), dtype=np.int8)
                w = rng.integers(-127, 128, (N, K), dtype=np.int8)
                xa, wa, cz = x.view(np.int32), w.view(np.int32), np.zeros(M * N, np.int32)
            bufs, bg = bind(wgpu, dev, pipe, [xa, wa, cz])
            t = gpu_time(wgpu, dev, pipe, bg, (N // (TN * n), M // (TM * m), 1))
            out = np.frombuffer(dev.queue.read_buffer(bufs[2]), cz.dtype).reshape(M, N).astype(np.float64)
            rows = slice(0, 64)
            ref = x[rows].astype(np.float64) @ w.astype(np.float64).T
            err = np.abs(out[rows] - ref).max() / np.abs(ref).max()
            print(f"[{label}] {t * 1e6:.0f} us, {2 * M * N * K / t / 1e12:.1f} T(FL)OP/s, rel err {err:.2e}")


TILED = """enable chromium_experimental_subgroup_matrix;
// C[M,N] = sum over 32-blocks b of SX[m,b] SW[n,b] (X_b . W_b), int8 X [M,K] and W [N,K] packed 4 per i32.
// One subgroup of 32 per workgroup (Tint wants the matrix loads' and stores' offsets workgroup-uniform),
// a 32 x 64 tile: 2 x 4 products of 16 x 16 x 32 per 32-block.
@group(0) @binding(0) var<storage, read> X: array<i32>;
@group(0) @binding(1) var<storage, read> W: array<i32>;
@group(0) @binding(2) var<storage, read> SX: array<f32>;
@group(0) @binding(3) var<storage, read> SW: array<f32>;
@group(0) @binding(4) var<storage, read_write> C: array<f32>;
const K = {K}u;
const N = {N}u;
const KW = K / 4u;
const NB = K / 32u;
var<workgroup> xs: array<i32, 256>;
var<workgroup> ws: array<i32, 512>;
var<workgroup> sxs: array<f32, 32>;
var<workgroup> sws: array<f32, 64>;
var<workgroup> rs: array<i32, 2048>;
@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) l: u32) {
  let m0 = wid.y * 32u;
  let n0 = wid.x * 64u;
  let s = 0u; let sm = 0u; let sn = 0u;
  var acc: array<f32, 64>;
  var c00: subgroup_matrix_result<i32, 16, 16>; var c01: subgroup_matrix_result<i32, 16, 16>;
  var c02: subgroup_matrix_result<i32, 16, 16>; var c03: subgroup_matrix_result<i32, 16, 16>;
  var c10: subgroup_matrix_result<i32, 16, 16>; var c11: subgroup_matrix_result<i32, 16, 16>;
  var c12: subgroup_matrix_result<i32, 16, 16>; var c13: subgroup_matrix_result<i32, 16, 16>;
  for (var b = 0u; b < NB; b++) {
    for (var i = 0u; i < 8u; i++) {
      let w = l + i * 32u;
      xs[w] = X[(m0 + w / 8u) * KW + b * 8u + w % 8u];
    }
    for (var i = 0u; i < 16u; i++) {
      let w = l + i * 32u;
      ws[w] = W[(n0 + w / 8u) * KW + b * 8u + w % 8u];
    }
    sxs[l] = SX[(m0 + l) * NB + b];
    sws[l] = SW[(n0 + l) * NB + b];
    sws[l + 32u] = SW[(n0 + l + 32u) * NB + b];
    workgroupBarrier();
    let a0 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&xs, 0u, false, 32u);
    let a1 = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&xs, 512u, false, 32u);
    let b0 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, 0u, true, 32u);
    let b1 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, 512u, true, 32u);
    let b2 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, 1024u, true, 32u);
    let b3 = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&ws, 1536u, true, 32u);
{BODY}
    workgroupBarrier();
  }
{TAIL}
}
"""

SCALED_BODY = """    let rb = 0u;
    subgroupMatrixStore(&rs, rb + 0u, subgroupMatrixMultiply<i32>(a0, b0), false, 64u);
    subgroupMatrixStore(&rs, rb + 16u, subgroupMatrixMultiply<i32>(a0, b1), false, 64u);
    subgroupMatrixStore(&rs, rb + 32u, subgroupMatrixMultiply<i32>(a0, b2), false, 64u);
    subgroupMatrixStore(&rs, rb + 48u, subgroupMatrixMultiply<i32>(a0, b3), false, 64u);
    subgroupMatrixStore(&rs, rb + 1024u, subgroupMatrixMultiply<i32>(a1, b0), false, 64u);
    subgroupMatrixStore(&rs, rb + 1040u, subgroupMatrixMultiply<i32>(a1, b1), false, 64u);
    subgroupMatrixStore(&rs, rb + 1056u, subgroupMatrixMultiply<i32>(a1, b2), false, 64u);
    subgroupMatrixStore(&rs, rb + 1072u, subgroupMatrixMultiply<i32>(a1, b3), false, 64u);
    workgroupBarrier();
    let w0 = sws[sn * 64u + l];
    let w1 = sws[sn * 64u + 32u + l];
    for (var it = 0u; it < 64u; it += 2u) {
      let xsc = sxs[sm * 32u + it / 2u];
      acc[it] += f32(rs[rb + it * 32u + l]) * xsc * w0;
      acc[it + 1u] += f32(rs[rb + it * 32u + 32u + l]) * xsc * w1;
    }"""

SCALED_TAIL = """  for (var it = 0u; it < 64u; it++) {
    let e = it * 32u + l;
    C[(m0 + sm * 32u + e / 64u) * N + n0 + sn * 64u + e % 64u] = acc[it];
  }"""

RAW_BODY = """    c00 = subgroupMatrixMultiplyAccumulate(a0, b0, c00); c01 = subgroupMatrixMultiplyAccumulate(a0, b1, c01);
    c02 = subgroupMatrixMultiplyAccumulate(a0, b2, c02); c03 = subgroupMatrixMultiplyAccumulate(a0, b3, c03);
    c10 = subgroupMatrixMultiplyAccumulate(a1, b0, c10); c11 = subgroupMatrixMultiplyAccumulate(a1, b1, c11);
    c12 = subgroupMatrixMultiplyAccumulate(a1, b2, c12); c13 = subgroupMatrixMultiplyAccumulate(a1, b3, c13);"""

RAW_TAIL = """  let r0 = m0 + sm * 32u;
  let q0 = n0 + sn * 64u;
  let o = r0 * N + q0;
  subgroupMatrixStore(&rs, 0u, c00, false, 64u);
  subgroupMatrixStore(&rs, 16u, c01, false, 64u);
  subgroupMatrixStore(&rs, 32u, c02, false, 64u);
  subgroupMatrixStore(&rs, 48u, c03, false, 64u);
  subgroupMatrixStore(&rs, 1024u, c10, false, 64u);
  subgroupMatrixStore(&rs, 1040u, c11, false, 64u);
  subgroupMatrixStore(&rs, 1056u, c12, false, 64u);
  subgroupMatrixStore(&rs, 1072u, c13, false, 64u);
  workgroupBarrier();
  for (var it = 0u; it < 64u; it++) {
    let e = it * 32u + l;
    C[(r0 + e / 64u) * N + q0 + e % 64u] = f32(rs[e]) + acc[0] * 0.0;
  }"""


def tiled() -> None:
    """The staged int8 GEMM with llama.cpp's per-32 scales, and without them (the tensor cores' ceiling)."""
    wgpu, _ = instance()
    ad = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    dev = ad.request_device_sync(required_features=["subgroups", "timestamp-query",
                                                    "chromium-experimental-subgroup-matrix"])
    rng = np.random.default_rng(1)
    for M, N, K in ((512, 4096, 4096), (512, 14336, 4096), (512, 4096, 14336)):
        x = rng.integers(-127, 128, (M, K), dtype=np.int8)
        w = rng.integers(-127, 128, (N, K), dtype=np.int8)
        sx = rng.uniform(0.5, 1.5, (M, K // 32)).astype(np.float32)
        sw = rng.uniform(0.5, 1.5, (N, K // 32)).astype(np.float32)
        for kind in ("scaled", "raw"):
            body, tail = (SCALED_BODY, SCALED_TAIL) if kind == "scaled" else (RAW_BODY, RAW_TAIL)
            src = TILED.replace("{BODY}", body).replace("{TAIL}", tail).replace("{K}", str(K)) \
                .replace("{N}", str(N))
            pipe = pipeline(dev, src, f"tiled {kind}")
            if pipe is None:
                continue
            arrays = [x.view(np.int32), w.view(np.int32), sx, sw, np.zeros(M * N, np.float32)]
            bufs, bg = bind(wgpu, dev, pipe, arrays)
            t = gpu_time(wgpu, dev, pipe, bg, (N // 64, M // 32, 1), reps=5)
            out = np.frombuffer(dev.queue.read_buffer(bufs[4]), np.float32).reshape(M, N)
            r = slice(0, 64)
            xb = x[r].astype(np.float64).reshape(64, K // 32, 32)
            wb = w.astype(np.float64).reshape(N, K // 32, 32)
            blocks = np.einsum("mbk,nbk->mnb", xb, wb)
            ref = np.einsum("mnb,mb,nb->mn", blocks, sx[r], sw) if kind == "scaled" else blocks.sum(-1)
            err = np.abs(out[r] - ref).max() / np.abs(ref).max()
            print(f"[tiled {kind} {M}x{N}x{K}] {t * 1e6:.0f} us, {2 * M * N * K / t / 1e12:.1f} TOP/s, "
                  f"rel err {err:.2e}")


def f16_tiled_src(K: int, N: int, TM: int, TN: int) -> str:
    """C = X W^T in f16 with f32 results: one subgroup per workgroup, a (16 TM) x (16 TN) tile, k steps of
    32 staged in workgroup memory (the shape a dequantize-to-f16 prefill GEMM would have)."""
    bm, bn = 16 * TM, 16 * TN
    decl = "\n".join(f"  var c{i}_{j}: subgroup_matrix_result<f32, 16, 16>;" for i in range(TM) for j in range(TN))
    # the two k halves of a step, each in its own scope (names reused)
    half = lambda kk: "\n".join(
        ["    {"] +
        [f"      let a{i} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, {i * 16 * 32 + kk}u, false, 32u);" for i in range(TM)] +
        [f"      let b{j} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, {j * 16 * 32 + kk}u, true, 32u);" for j in range(TN)] +
        [f"      c{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, c{i}_{j});" for i in range(TM) for j in range(TN)] +
        ["    }"])
    stores = "\n".join(f"  subgroupMatrixStore(&C, (m0 + {16 * i}u) * {N}u + n0 + {16 * j}u, c{i}_{j}, false, {N}u);"
                       for i in range(TM) for j in range(TN))
    return f"""enable f16;
enable chromium_experimental_subgroup_matrix;
@group(0) @binding(0) var<storage, read> X: array<vec4<u32>>;
@group(0) @binding(1) var<storage, read> W: array<vec4<u32>>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
var<workgroup> xs: array<f16, {bm * 32}>;
var<workgroup> ws: array<f16, {bn * 32}>;
@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) l: u32) {{
  let m0 = wid.y * {bm}u;
  let n0 = wid.x * {bn}u;
{decl}
  for (var k0 = 0u; k0 < {K}u; k0 += 32u) {{
    for (var i = l; i < {bm * 4}u; i += 32u) {{      // 4 x 16-byte vectors (8 halves) per row of 32
      let v = X[((m0 + i / 4u) * {K}u + k0) / 8u + i % 4u];
      for (var h = 0u; h < 4u; h++) {{
        let p = unpack2x16float(v[h]);
        xs[i * 8u + 2u * h] = f16(p.x);
        xs[i * 8u + 2u * h + 1u] = f16(p.y);
      }}
    }}
    for (var i = l; i < {bn * 4}u; i += 32u) {{
      let v = W[((n0 + i / 4u) * {K}u + k0) / 8u + i % 4u];
      for (var h = 0u; h < 4u; h++) {{
        let p = unpack2x16float(v[h]);
        ws[i * 8u + 2u * h] = f16(p.x);
        ws[i * 8u + 2u * h + 1u] = f16(p.y);
      }}
    }}
    workgroupBarrier();
{half(0)}
{half(16)}
    workgroupBarrier();
  }}
{stores}
}}
"""


def f16_tiled() -> None:
    """Times f16_tiled_src at the 8B's prefill shapes, four tile shapes each."""
    wgpu, _ = instance()
    dev = mma_device(wgpu)
    rng = np.random.default_rng(2)
    for M, N, K in ((512, 4096, 4096), (512, 14336, 4096), (512, 4096, 14336)):
        x = (rng.standard_normal((M, K)) * 0.1).astype(np.float16)
        w = (rng.standard_normal((N, K)) * 0.1).astype(np.float16)
        for TM, TN in ((2, 4), (4, 4), (4, 2), (2, 8)):
            label = f"f16 tiled {M}x{N}x{K} tile {16 * TM}x{16 * TN}"
            pipe = pipeline(dev, f16_tiled_src(K, N, TM, TN), label)
            if pipe is None:
                continue
            bufs, bg = bind(wgpu, dev, pipe, [x, w, np.zeros(M * N, np.float32)])
            t = gpu_time(wgpu, dev, pipe, bg, (N // (16 * TN), M // (16 * TM), 1))
            out = np.frombuffer(dev.queue.read_buffer(bufs[2]), np.float32).reshape(M, N)
            ref = x[:64].astype(np.float64) @ w.astype(np.float64).T
            err = np.abs(out[:64] - ref).max() / np.abs(ref).max()
            print(f"[{label}] {t * 1e6:.0f} us, {2 * M * N * K / t / 1e12:.1f} TFLOP/s, rel err {err:.2e}")


if __name__ == "__main__":
    if len(sys.argv) > 1 and sys.argv[1] == "--tiled":
        tiled()
    elif len(sys.argv) > 1 and sys.argv[1] == "--f16-tiled":
        f16_tiled()
    else:
        t0 = time.perf_counter()
        probe()
        print(f"probe {time.perf_counter() - t0:.1f} s")
