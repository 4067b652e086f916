// x pass of the matrix-unit GEMM (gemm_mma.wgsl): x [m, k] f32 -> XH [m][k / 8] f16 (8 halves per vec4),
// once per GEMM input, so the GEMM's workgroups along n read half the bytes and convert nothing. Rows at
// or past n_tokens are skipped. Without HAS_NORM one thread per 8 elements (grid k / 8 WG x m); with it
// (a prefill matmul_multi / matmul_glu with the RMS norm in its prologue, attr norm_eps) one workgroup
// per row: it sums the row's squares, then writes x / sqrt(mean(x^2) + EPS) * NW (as rms_norm.wgsl), so
// the normed rows are never written in f32. PERM4 (gemm_mmv.wgsl's x): each 4 k stored as k0 k2 k1 k3.
enable f16;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

const WG: u32 = {{WG}}u;
const ROWS: u32 = 1u;
const HAS_NORM: bool = {{HAS_NORM}};
const PERM4: bool = {{PERM4}};
const EPS: f32 = {{EPS}};
#include "common/reduce_{{RED}}.wgsl"

@group(0) @binding(6) var<storage, read_write> XH: array<vec4<u32>>;
@group(0) @binding(8) var<storage, read> NW: array<vec4<f32>>;

var<workgroup> inv_s: f32;

fn h2(a: f32, b: f32) -> u32 {
  return bitcast<u32>(vec2<f16>(f16(a), f16(b)));
}

// Elements 8 c .. 8 c + 7 of row m, times s (and the norm weights under HAS_NORM), as halves.
fn put(m: u32, c: u32, s: f32) {
  let i = m * (D.k / 4u) + 2u * c;
  var a = X[i] * s;
  var b = X[i + 1u] * s;
  if (HAS_NORM) { a *= NW[2u * c]; b *= NW[2u * c + 1u]; }
  if (PERM4) {
    XH[m * (D.k / 8u) + c] = vec4<u32>(h2(a.x, a.z), h2(a.y, a.w), h2(b.x, b.z), h2(b.y, b.w));
  } else {
    XH[m * (D.k / 8u) + c] = vec4<u32>(h2(a.x, a.y), h2(a.z, a.w), h2(b.x, b.y), h2(b.z, b.w));
  }
}

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>) {
  let m = wid.y;
  if (m >= D.m || m >= P.n_tokens * {{RPT}}u) { return; }   // uniform per workgroup (RPT: rows per token)
  if (!HAS_NORM) {
    let c = wid.x * WG + lane.lid;
    if (c < D.k / 8u) { put(m, c, 1.0); }
    return;
  }
  var ss: array<f32, 1>;
  ss[0] = 0.0;
  for (var c = lane.lid; c < D.k / 4u; c += WG) { let v = X[m * (D.k / 4u) + c]; ss[0] += dot(v, v); }
  let total = sum_rows(lane, ss);
  if (lane.lid == 0u) { inv_s = inverseSqrt(total / f32(D.k) + EPS); }
  workgroupBarrier();
  let inv = inv_s;
  for (var c = lane.lid; c < D.k / 8u; c += WG) { put(m, c, inv); }
}
