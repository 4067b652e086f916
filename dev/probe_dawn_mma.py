"""Tensor-core GEMM through Dawn with several subgroups per workgroup (Tint's uniformity check for subgroup
matrices switched off by its diagnostic rule), f16 products with f32 results.

    python3 dev/probe_dawn_mma.py     # on the H100: bash ../shared/gpu/prepare.sh wgpudawn first
"""
from __future__ import annotations

import itertools
import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from probe_dawn import bind, gpu_time, instance, pipeline  # noqa: E402


def src(K: int, N: int, SGM: int, SGN: int, TM: int, TN: int, BK: int, PAD: int, xf16: bool, wq8: bool,
        xdirect: bool = False, wdirect: bool = False) -> str:
    """C[M,N] = X[M,K] W[N,K]^T. Workgroup: SGM x SGN subgroups of 32, each a (16 TM) x (16 TN) tile of
    16x16 results; k staged BK at a time as f16 in workgroup memory (rows padded by PAD halves).
    X: f32 (converted while staging) or f16 in storage. W: f16, or Q8_0-like (int8 + one f32 scale per 32)
    dequantized while staging."""
    BM, BN, WG, LD = SGM * 16 * TM, SGN * 16 * TN, 32 * SGM * SGN, BK + PAD
    decl = "\n".join(f"  var c{i}_{j}: subgroup_matrix_result<f32, 16, 16>;" for i in range(TM) for j in range(TN))
    steps = []
    for kk in range(0, BK, 16):
        steps += ["    {"]
        if xdirect:
            steps += [f"      let a{i} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&X, (m0 + sm * {16 * TM}u + {16 * i}u) * {K}u + k0 + {kk}u, false, {K}u);" for i in range(TM)]
        else:
            steps += [f"      let a{i} = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(&xs, xo + {i * 16 * LD + kk}u, false, {LD}u);" for i in range(TM)]
        if wdirect:
            steps += [f"      let b{j} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&W, (n0 + sn * {16 * TN}u + {16 * j}u) * {K}u + k0 + {kk}u, true, {K}u);" for j in range(TN)]
        else:
            steps += [f"      let b{j} = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(&ws, wo + {j * 16 * LD + kk}u, true, {LD}u);" for j in range(TN)]
        steps += [f"      c{i}_{j} = subgroupMatrixMultiplyAccumulate(a{i}, b{j}, c{i}_{j});" for i in range(TM) for j in range(TN)]
        steps += ["    }"]
    stores = "\n".join(f"  subgroupMatrixStore(&C, (m0 + sm * {16 * TM}u + {16 * i}u) * {N}u + n0 + sn * {16 * TN}u + {16 * j}u, c{i}_{j}, false, {N}u);"
                       for i in range(TM) for j in range(TN))
    def halves(dst: str, src: str, r0: str, rows: int) -> str:
        """Staging of ``rows`` rows of BK f16 values (8 per vec4<u32> of ``src``) into ``dst``."""
        return f"""    for (var i = l; i < {rows * BK // 8}u; i += {WG}u) {{
      let r = i / {BK // 8}u; let c = i % {BK // 8}u;
      let v = {src}[(({r0} + r) * {K}u + k0) / 8u + c];
      for (var h = 0u; h < 4u; h++) {{
        let p = unpack2x16float(v[h]);
        {dst}[r * {LD}u + c * 8u + 2u * h] = f16(p.x); {dst}[r * {LD}u + c * 8u + 2u * h + 1u] = f16(p.y);
      }}
    }}"""

    if xf16:
        xdecl = "@group(0) @binding(0) var<storage, read> X: array<vec4<u32>>;"
        xload = halves("xs", "X", "m0", BM)
    else:
        xdecl = "@group(0) @binding(0) var<storage, read> X: array<vec4<f32>>;"
        xload = f"""    for (var i = l; i < {BM * BK // 4}u; i += {WG}u) {{
      let r = i / {BK // 4}u; let c = i % {BK // 4}u;
      let v = vec4<f16>(X[((m0 + r) * {K}u + k0) / 4u + c]);
      let o = r * {LD}u + c * 4u;
      xs[o] = v.x; xs[o + 1u] = v.y; xs[o + 2u] = v.z; xs[o + 3u] = v.w;
    }}"""
    if wq8:
        wdecl = ("@group(0) @binding(1) var<storage, read> W: array<vec4<i32>>;   // 16 int8 per vec4\n"
                 "@group(0) @binding(3) var<storage, read> S: array<f32>;         // one scale per 32")
        wload = f"""    for (var i = l; i < {BN * BK // 16}u; i += {WG}u) {{
      let r = i / {BK // 16}u; let c = i % {BK // 16}u;
      let v = W[((n0 + r) * {K}u + k0) / 16u + c];
      let d = f16(S[((n0 + r) * {K}u + k0 + c * 16u) / 32u]);
      let o = r * {LD}u + c * 16u;
      for (var h = 0u; h < 4u; h++) {{
        let q = vec4<f16>(unpack4xI8(bitcast<u32>(v[h]))) * d;
        ws[o + 4u * h] = q.x; ws[o + 4u * h + 1u] = q.y; ws[o + 4u * h + 2u] = q.z; ws[o + 4u * h + 3u] = q.w;
      }}
    }}"""
    else:
        wdecl = "@group(0) @binding(1) var<storage, read> W: array<vec4<u32>>;"
        wload = halves("ws", "W", "n0", BN)
    if xdirect:
        xdecl, xload = "@group(0) @binding(0) var<storage, read> X: array<f16>;", ""
    if wdirect:
        wdecl, wload = "@group(0) @binding(1) var<storage, read> W: array<f16>;", ""
    barrier = "" if xdirect and wdirect else "    workgroupBarrier();"
    body = "\n".join(steps)
    return f"""diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
{xdecl}
{wdecl}
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
{"" if xdirect else f"var<workgroup> xs: array<f16, {BM * LD}>;"}
{"" if wdirect else f"var<workgroup> ws: array<f16, {BN * LD}>;"}
@compute @workgroup_size({WG})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) l: u32) {{
  let m0 = wid.y * {BM}u;
  let n0 = wid.x * {BN}u;
  let sg = l / 32u;
  let sm = sg % {SGM}u;
  let sn = sg / {SGM}u;
  let xo = sm * {16 * TM * LD}u;
  let wo = sn * {16 * TN * LD}u;
{decl}
  for (var k0 = 0u; k0 < {K}u; k0 += {BK}u) {{
{xload}
{wload}
{barrier}
{body}
{barrier}
  }}
{stores}
}}
"""


def main() -> None:
    wgpu, _ = instance()
    ad = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    lim = dict(ad.limits)
    print("wg storage", lim["max-compute-workgroup-storage-size"], "invocations",
          lim["max-compute-invocations-per-workgroup"])
    dev = ad.request_device_sync(
        required_features=["shader-f16", "subgroups", "timestamp-query", "chromium-experimental-subgroup-matrix"],
        required_limits={"max-compute-workgroup-storage-size": lim["max-compute-workgroup-storage-size"],
                         "max-compute-invocations-per-workgroup": lim["max-compute-invocations-per-workgroup"],
                         "max-compute-workgroup-size-x": lim["max-compute-workgroup-size-x"],
                         "max-storage-buffer-binding-size": lim["max-storage-buffer-binding-size"],
                         "max-buffer-size": lim["max-buffer-size"]})
    rng = np.random.default_rng(3)
    only = os.environ.get("ONLY", "")
    shapes = ((512, 4096, 4096), (512, 14336, 4096), (512, 4096, 14336))
    modes = [  # xf16, wq8, xdirect, wdirect
        (True, False, True, True), (True, False, False, True), (True, False, True, False), (True, True, True, False),
        (True, True, False, False)]
    configs = [(2, 4, 2, 2, 32, 8), (4, 2, 2, 2, 32, 8), (2, 2, 2, 2, 32, 8), (1, 1, 2, 4, 32, 8), (2, 2, 2, 4, 32, 8),
               (4, 4, 2, 2, 32, 8), (2, 4, 2, 2, 64, 8), (1, 4, 2, 2, 32, 8), (4, 1, 2, 2, 32, 8), (2, 2, 1, 2, 32, 8)]
    for (M, N, K), (xf16, wq8, xdirect, wdirect) in itertools.product(shapes, modes):
        if (M, N, K) != shapes[0] and xdirect + wdirect == 0:
            continue
        x = (rng.standard_normal((M, K)) * 0.5).astype(np.float32)
        if wq8:
            q = rng.integers(-127, 128, (N, K), dtype=np.int8)
            s = rng.uniform(0.001, 0.01, (N, K // 32)).astype(np.float32)
            wref = q.astype(np.float64) * np.repeat(s.astype(np.float16).astype(np.float64), 32, axis=1)
            warr = q.view(np.int32)
        else:
            w = (rng.standard_normal((N, K)) * 0.05).astype(np.float16)
            wref, warr = w.astype(np.float64), w
        xarr = x.astype(np.float16) if xf16 else x
        for cfg in configs:
            SGM, SGN, TM, TN, BK, PAD = cfg
            BM, BN = SGM * 16 * TM, SGN * 16 * TN
            label = f"{M}x{N}x{K} x{'f16' if xf16 else 'f32'}{'D' if xdirect else 'S'} w{'q8' if wq8 else 'f16'}{'D' if wdirect else 'S'} sg {SGM}x{SGN} t {TM}x{TN} BK {BK} pad {PAD} tile {BM}x{BN}"
            if only and only not in label:
                continue
            pipe = pipeline(dev, src(K, N, SGM, SGN, TM, TN, BK, PAD, xf16, wq8, xdirect, wdirect), label)
            if pipe is None:
                continue
            arrays = [xarr, warr, np.zeros(M * N, np.float32)] + ([s] if wq8 else [])
            bufs, bg = bind(wgpu, dev, pipe, arrays)
            t = gpu_time(wgpu, dev, pipe, bg, (N // BN, M // BM, 1), reps=5)
            out = np.frombuffer(dev.queue.read_buffer(bufs[2]), np.float32).reshape(M, N)
            ref = x[:64].astype(np.float64) @ wref.T
            err = np.abs(out[:64] - ref).max() / np.abs(ref).max()
            print(f"[{label}] {t * 1e6:.0f} us, {2 * M * N * K / t / 1e12:.1f} TFLOP/s, rel err {err:.2e}", flush=True)


if __name__ == "__main__":
    main()
