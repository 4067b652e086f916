// x pass of the matrix-unit GEMM (gemm_mma.wgsl): x [m, k] f32 -> XH [m][k / 8] f16 (8 halves per vec4),
// once per GEMM input, so the GEMM's workgroups along n read half the bytes and convert nothing. One
// thread per 8 elements; rows at or past n_tokens are skipped.
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

@group(0) @binding(6) var<storage, read_write> XH: array<vec4<u32>>;

fn h2(a: f32, b: f32) -> u32 {
  return bitcast<u32>(vec2<f16>(f16(a), f16(b)));
}

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let m = gid.y;
  if (c >= D.k / 8u || m >= D.m || m >= P.n_tokens) { return; }
  let i = m * (D.k / 4u) + 2u * c;
  let a = X[i];
  let b = X[i + 1u];
  XH[m * (D.k / 8u) + c] = vec4<u32>(h2(a.x, a.y), h2(a.z, a.w), h2(b.x, b.y), h2(b.z, b.w));
}
