// x pass of the integer-dot GEMM (gemm_q8.wgsl): x [m, k] f32 -> XQB [m][k / 16] (16 int8 per vec4) and
// XDB [m][k / 32] = (d, d * sum of the int8) per 32 consecutive elements (common/q8.wgsl xquant: d =
// max |x| / 127, the values rounded to multiples of d). Once per GEMM input, so the GEMM's workgroups
// along n do not each quantize x again. One thread per block; rows at or past n_tokens (RPT rows per token: matmul_id's per-slot x) are skipped.
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "common/q8.wgsl"

@group(0) @binding(6) var<storage, read_write> XQB: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read_write> XDB: array<vec2<f32>>;

@compute @workgroup_size(64)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let nb = D.k / 32u;
  let b = gid.x;
  let m = gid.y;
  if (b >= nb || m >= D.m || m >= P.n_tokens * {{RPT}}u) { return; }
  let i = m * (D.k / 4u) + 8u * b;
  let xs = XS(X[i], X[i + 1u], X[i + 2u], X[i + 3u], X[i + 4u], X[i + 5u], X[i + 6u], X[i + 7u]);
  let q = xquant(xs, 8u);
  let o = m * nb + b;
  XQB[2u * o] = vec4<u32>(q.q[0], q.q[1], q.q[2], q.q[3]);
  XQB[2u * o + 1u] = vec4<u32>(q.q[4], q.q[5], q.q[6], q.q[7]);
  XDB[o] = vec2<f32>(q.d, q.d * f32(xsum(q, 0u, 8u)));
}
