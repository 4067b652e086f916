// LayerNorm over each row, one workgroup per row, two passes as ggml_norm:
// y = (x - mean) / sqrt(mean((x - mean)^2) + eps) * w + b.
// Defines: N (row width), ROWS (rows in the tensor), EPS, WG (power of two), RED ("sg" | "wg").
const WG: u32 = {{WG}}u;
const ROWS: u32 = 1u;
#include "common/reduce_{{RED}}.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> w: array<f32>;
@group(0) @binding(3) var<storage, read> b: array<f32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

var<workgroup> stat: f32;

@compute @workgroup_size({{WG}})
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let row = wid.y * nwg.x + wid.x;
  let live = row < {{ROWS}}u;        // uniform per workgroup
  let base = row * {{N}}u;
  var acc: array<f32, 1>;
  acc[0] = 0.0;
  if (live) { for (var c = lane.lid; c < {{N}}u; c += WG) { acc[0] += x[base + c]; } }
  let total = sum_rows(lane, acc);
  if (lane.lid == 0u) { stat = total / f32({{N}}u); }
  workgroupBarrier();
  let mean = stat;
  workgroupBarrier();
  acc[0] = 0.0;
  if (live) { for (var c = lane.lid; c < {{N}}u; c += WG) { let d = x[base + c] - mean; acc[0] += d * d; } }
  let ss = sum_rows(lane, acc);
  if (lane.lid == 0u) { stat = inverseSqrt(ss / f32({{N}}u) + {{EPS}}); }
  workgroupBarrier();
  let inv = stat;
  if (live) {
    for (var c = lane.lid; c < {{N}}u; c += WG) { y[base + c] = (x[base + c] - mean) * inv * w[c] + b[c]; }
  }
}
