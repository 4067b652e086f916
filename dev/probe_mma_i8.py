"""Dawn's integer subgroup matrices (i8 x i8 -> i32, 16 x 16 x 32) on the GPU at hand: do they load, multiply
and store as numpy says, and what is their peak rate beside the f16 ones (f16 x f16 -> f32, 16 x 16 x 16)?
The question behind an MMQ-like decode-batch / prefill GEMM (docs/perf-log.md, fifth session).

    DAWN_TOGGLES=vulkan_enable_f16_on_nvidia python3 dev/probe_mma_i8.py     # on the GPU machine (Dawn)
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from probe_dawn import bind, gpu_time, instance, mma_device, pipeline, run_once  # noqa: E402

HEAD = ("diagnostic(off, chromium.subgroup_matrix_uniformity);\nenable f16;\n"
        "enable chromium_experimental_subgroup_matrix;\n")

CHECK = HEAD + """
@group(0) @binding(0) var<storage, read> A: array<i32>;        // 16 x 32 int8, row-major (4 per word)
@group(0) @binding(1) var<storage, read> B: array<i32>;        // 32 x 16 int8, row-major
@group(0) @binding(2) var<storage, read_write> C: array<i32>;  // 16 x 16
@compute @workgroup_size(32)
fn main() {
  let a = subgroupMatrixLoad<subgroup_matrix_left<i8, 32, 16>>(&A, 0u, false, 32u);
  let b = subgroupMatrixLoad<subgroup_matrix_right<i8, 16, 32>>(&B, 0u, false, 16u);
  subgroupMatrixStore(&C, 0u, subgroupMatrixMultiply<i32>(a, b), false, 16u);
}
"""


def rate_src(kind: str, iters: int) -> str:
    """4 subgroups a workgroup, each 4 independent accumulators over ``iters`` multiply-accumulates of
    operands loaded once (the peak of the matrix units alone, no staging)."""
    if kind == "i8":
        l, r, res, arr, k = "subgroup_matrix_left<i8, 32, 16>", "subgroup_matrix_right<i8, 16, 32>", \
            "subgroup_matrix_result<i32, 16, 16>", "i32", 32
    else:
        l, r, res, arr, k = "subgroup_matrix_left<f16, 16, 16>", "subgroup_matrix_right<f16, 16, 16>", \
            "subgroup_matrix_result<f32, 16, 16>", "f16", 16
    out = "i32" if kind == "i8" else "f32"
    return HEAD + f"""
@group(0) @binding(0) var<storage, read> A: array<{arr}>;
@group(0) @binding(1) var<storage, read_write> C: array<{out}>;
@compute @workgroup_size(128)
fn main(@builtin(workgroup_id) wg: vec3<u32>, @builtin(local_invocation_index) li: u32) {{
  let sg = li / 32u;
  let a0 = subgroupMatrixLoad<{l}>(&A, 0u, false, {k}u);
  let a1 = subgroupMatrixLoad<{l}>(&A, 512u, false, {k}u);
  let b0 = subgroupMatrixLoad<{r}>(&A, 1024u, false, 16u);
  let b1 = subgroupMatrixLoad<{r}>(&A, 1536u, false, 16u);
  var c0: {res}; var c1: {res}; var c2: {res}; var c3: {res};
  for (var i = 0u; i < {iters}u; i++) {{
    c0 = subgroupMatrixMultiplyAccumulate(a0, b0, c0);
    c1 = subgroupMatrixMultiplyAccumulate(a0, b1, c1);
    c2 = subgroupMatrixMultiplyAccumulate(a1, b0, c2);
    c3 = subgroupMatrixMultiplyAccumulate(a1, b1, c3);
  }}
  let o = (wg.x * 4u + sg) * 1024u;
  subgroupMatrixStore(&C, o, c0, false, 16u);
  subgroupMatrixStore(&C, o + 256u, c1, false, 16u);
  subgroupMatrixStore(&C, o + 512u, c2, false, 16u);
  subgroupMatrixStore(&C, o + 768u, c3, false, 16u);
}}
"""


def main() -> None:
    wgpu, _ = instance()
    dev = mma_device(wgpu)
    rng = np.random.default_rng(0)
    a = rng.integers(-128, 128, (16, 32), dtype=np.int8)
    b = rng.integers(-128, 128, (32, 16), dtype=np.int8)
    pipe = pipeline(dev, CHECK, "i8 check")
    if pipe is not None:
        bufs, bg = bind(wgpu, dev, pipe, [a.view(np.int32), b.view(np.int32), np.zeros(256, np.int32)])
        run_once(dev, pipe, bg, (1, 1, 1))
        got = np.frombuffer(dev.queue.read_buffer(bufs[2]), np.int32).reshape(16, 16)
        ref = a.astype(np.int64) @ b.astype(np.int64)
        print(f"i8 16x32 @ 32x16 -> i32: {'exact' if np.array_equal(got, ref) else 'WRONG'} "
              f"(max |diff| {np.abs(got - ref).max()}, ref max {np.abs(ref).max()})")
    iters, groups = 4096, 132 * 16
    for kind in ("i8", "f16"):
        pipe = pipeline(dev, rate_src(kind, iters), f"{kind} rate")
        if pipe is None:
            continue
        src = (rng.integers(-3, 4, 4096, dtype=np.int8).view(np.int32) if kind == "i8"
               else (rng.standard_normal(2048) * 0.01).astype(np.float16))
        out = np.zeros(groups * 4 * 1024, np.int32 if kind == "i8" else np.float32)
        _, bg = bind(wgpu, dev, pipe, [src, out])
        t = gpu_time(wgpu, dev, pipe, bg, (groups, 1, 1), reps=3)
        k = 32 if kind == "i8" else 16
        ops = groups * 4 * 4 * iters * 16 * 16 * k * 2
        print(f"{kind}: {t * 1e3:.2f} ms, {ops / t / 1e12:.0f} T{'OP' if kind == 'i8' else 'FLOP'}/s "
              f"(dense matrix-unit products alone, operands in registers)")


if __name__ == "__main__":
    main()
