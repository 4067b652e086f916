"""Can WGSL reach the GPU's matrix units here? Requests `cooperative-matrix` where the adapter lists it,
then compiles small `enable wgpu_cooperative_matrix;` kernels (8x8 f32, 16x16 f16), checks their results
against float64 and times a 512 x 4096 x 4096 f16 GEMM. On the H100 with wgpu-py 0.32 / wgpu-native 29 the
adapter lists the feature but using it fails with "experimental features are not enabled", and
wgpu-native's C API has no switch for those: the prefill GEMM stays on f32 FMAs (docs/perf-log.md, Prefill).

    python3 dev/probe_coop_matrix.py      # on the GPU machine
"""
from __future__ import annotations

import os
import sys

import numpy as np

sys.path.insert(0, os.path.dirname(__file__))
from probe_dawn import run_once  # noqa: E402  (plain WebGPU calls)


def coop() -> None:
    import wgpu
    ad = wgpu.gpu.request_adapter_sync(power_preference="high-performance")
    feats = sorted(ad.features)
    print("adapter", ad.info["device"], ad.info["backend_type"])
    print("features", feats)
    want = [f for f in ("shader-f16", "subgroup", "timestamp-query", "cooperative-matrix") if f in feats]
    dev = ad.request_device_sync(required_features=want)
    print("device features", sorted(dev.features))

    def run(src: str, bufs: list[np.ndarray], out_idx: int, groups=(1, 1, 1), label="") -> np.ndarray | None:
        try:
            mod = dev.create_shader_module(code=src)
            pipe = dev.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
        except Exception as e:
            print(f"[{label}] compile FAILED: {' '.join(str(e).split())[:600]}")
            return None
        gbufs = [dev.create_buffer_with_data(data=b.tobytes(), usage=wgpu.BufferUsage.STORAGE
                                             | wgpu.BufferUsage.COPY_SRC) for b in bufs]
        bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0),
                                   entries=[{"binding": i, "resource": {"buffer": b}} for i, b in enumerate(gbufs)])
        run_once(dev, pipe, bg, groups)
        return np.frombuffer(dev.queue.read_buffer(gbufs[out_idx]), bufs[out_idx].dtype).copy()

    rng = np.random.default_rng(0)
    for n, et, wt in ((8, "f32", np.float32), (16, "f16", np.float16)):
        a = rng.standard_normal((n, n)).astype(wt)
        b = rng.standard_normal((n, n)).astype(wt)
        for load in ("coopLoad", "coopLoadT"):
            src = f"""enable wgpu_cooperative_matrix;
{'enable f16;' if et == 'f16' else ''}
@group(0) @binding(0) var<storage, read_write> A: array<{et}>;
@group(0) @binding(1) var<storage, read_write> B: array<{et}>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@compute @workgroup_size(32)
fn main() {{
  let a = {load}<coop_mat{n}x{n}<{et},A>>(&A[0], {n}u);
  let b = {load}<coop_mat{n}x{n}<{et},B>>(&B[0], {n}u);
  var c = coop_mat{n}x{n}<f32,C>();
  c = coopMultiplyAdd(a, b, c);
  coopStore(c, &C[0], {n}u);
}}"""
            c = np.zeros(n * n, np.float32)
            r = run(src, [a.ravel(), b.ravel(), c], 2, label=f"{n}x{n} {et} {load}")
            if r is None:
                continue
            r = r.reshape(n, n)
            A, B = a.astype(np.float64), b.astype(np.float64)
            cands = {"A@B": A @ B, "(A@B).T": (A @ B).T, "A.T@B.T": A.T @ B.T, "(A.T@B.T).T": (A.T @ B.T).T,
                     "A@B.T": A @ B.T, "A.T@B": A.T @ B, "(A@B.T).T": (A @ B.T).T, "(A.T@B).T": (A.T @ B).T}
            best = min(cands, key=lambda k: np.abs(cands[k] - r).max())
            print(f"[{n}x{n} {et} {load}] result matches {best}: max err {np.abs(cands[best] - r).max():.2e}"
                  f" (|C| max {np.abs(r).max():.1f})")

    # throughput: C[M,N] = A[M,K] B[K,N], f16 row-major, each subgroup a 32x32 block (2x2 tiles) from storage
    for (M, N, K) in ((512, 4096, 4096), (512, 14336, 4096)):
        src = f"""enable wgpu_cooperative_matrix;
enable f16;
@group(0) @binding(0) var<storage, read_write> A: array<f16>;
@group(0) @binding(1) var<storage, read_write> B: array<f16>;
@group(0) @binding(2) var<storage, read_write> C: array<f32>;
@compute @workgroup_size(32)
fn main(@builtin(workgroup_id) wid: vec3<u32>) {{
  let m0 = wid.y * 32u;
  let n0 = wid.x * 32u;
  var c00 = coop_mat16x16<f32,C>(); var c01 = coop_mat16x16<f32,C>();
  var c10 = coop_mat16x16<f32,C>(); var c11 = coop_mat16x16<f32,C>();
  for (var k = 0u; k < {K}u; k += 16u) {{
    let a0 = coopLoadT<coop_mat16x16<f16,A>>(&A[m0 * {K}u + k], {K}u);
    let a1 = coopLoadT<coop_mat16x16<f16,A>>(&A[(m0 + 16u) * {K}u + k], {K}u);
    let b0 = coopLoadT<coop_mat16x16<f16,B>>(&B[k * {N}u + n0], {N}u);
    let b1 = coopLoadT<coop_mat16x16<f16,B>>(&B[k * {N}u + n0 + 16u], {N}u);
    c00 = coopMultiplyAdd(a0, b0, c00); c01 = coopMultiplyAdd(a0, b1, c01);
    c10 = coopMultiplyAdd(a1, b0, c10); c11 = coopMultiplyAdd(a1, b1, c11);
  }}
  coopStoreT(c00, &C[m0 * {N}u + n0], {N}u); coopStoreT(c01, &C[m0 * {N}u + n0 + 16u], {N}u);
  coopStoreT(c10, &C[(m0 + 16u) * {N}u + n0], {N}u); coopStoreT(c11, &C[(m0 + 16u) * {N}u + n0 + 16u], {N}u);
}}"""
        a = (rng.standard_normal((M, K)) * 0.1).astype(np.float16)
        b = (rng.standard_normal((K, N)) * 0.1).astype(np.float16)
        c = np.zeros(M * N, np.float32)
        try:
            mod = dev.create_shader_module(code=src)
            pipe = dev.create_compute_pipeline(layout="auto", compute={"module": mod, "entry_point": "main"})
        except Exception as e:
            print(f"[gemm {M}x{N}x{K}] compile FAILED: {' '.join(str(e).split())[:600]}")
            continue
        gb = [dev.create_buffer_with_data(data=x.tobytes(), usage=wgpu.BufferUsage.STORAGE | wgpu.BufferUsage.COPY_SRC)
              for x in (a, b, c)]
        bg = dev.create_bind_group(layout=pipe.get_bind_group_layout(0),
                                   entries=[{"binding": i, "resource": {"buffer": x}} for i, x in enumerate(gb)])
        qs = dev.create_query_set(type="timestamp", count=2)
        qb = dev.create_buffer(size=16, usage=wgpu.BufferUsage.QUERY_RESOLVE | wgpu.BufferUsage.COPY_SRC)
        ts = []
        for _ in range(4):
            enc = dev.create_command_encoder()
            p = enc.begin_compute_pass(timestamp_writes={"query_set": qs, "beginning_of_pass_write_index": 0,
                                                         "end_of_pass_write_index": 1})
            p.set_pipeline(pipe)
            p.set_bind_group(0, bg)
            for _ in range(10):
                p.dispatch_workgroups(N // 32, M // 32, 1)
            p.end()
            enc.resolve_query_set(qs, 0, 2, qb, 0)
            dev.queue.submit([enc.finish()])
            t = np.frombuffer(dev.queue.read_buffer(qb), np.uint64).astype(np.int64)
            ts.append((t[1] - t[0]) * 1e-9 / 10)
        out = np.frombuffer(dev.queue.read_buffer(gb[2]), np.float32).reshape(M, N)
        ref = a.astype(np.float64) @ b.astype(np.float64)
        err = np.abs(out - ref).max() / np.abs(ref).max()
        t = min(ts[1:])
        print(f"[gemm {M}x{N}x{K} f16 coop from storage] {t * 1e6:.0f} us, {2 * M * N * K / t / 1e12:.1f} TFLOP/s, "
              f"rel err {err:.2e}")


if __name__ == "__main__":
    coop()
