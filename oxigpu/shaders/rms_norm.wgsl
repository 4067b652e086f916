// RMS norm over runs of GROUP contiguous values (GROUP == row width: a plain norm; head_dim: per-head
// Q/K norms), one workgroup per run: y = x / sqrt(mean(x^2) + eps) * w, plus res under RES (rms_norm_add:
// a block's post-norm and its residual add in one pass).
// Defines: GROUP, NSEG (runs in the tensor), EPS (f32 literal), WG (workgroup size, a power of two),
// RED ("sg" with subgroups, "wg" without), RES.
const WG: u32 = {{WG}}u;
const ROWS: u32 = 1u;
#include "common/reduce_{{RED}}.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;
@group(0) @binding(4) var<storage, read> res: array<f32>;
const RES: bool = {{RES}};

var<workgroup> inv_s: f32;

@compute @workgroup_size({{WG}})
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let seg = wid.y * nwg.x + wid.x;
  let live = seg < {{NSEG}}u;        // uniform per workgroup, so the reduction's barriers stay uniform
  let base = seg * {{GROUP}}u;
  var ss: array<f32, 1>;
  ss[0] = 0.0;
  if (live) {
    for (var c = lane.lid; c < {{GROUP}}u; c += WG) { let v = x[base + c]; ss[0] += v * v; }
  }
  let total = sum_rows(lane, ss);
  if (lane.lid == 0u) { inv_s = inverseSqrt(total / f32({{GROUP}}u) + {{EPS}}); }
  workgroupBarrier();
  let inv = inv_s;
  if (live) {
    for (var c = lane.lid; c < {{GROUP}}u; c += WG) {
      let v = x[base + c] * inv * w[c];
      if (RES) { y[base + c] = res[base + c] + v; } else { y[base + c] = v; }
    }
  }
}
