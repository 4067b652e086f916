// gather_rows: y[s] = x[rows[s]] for slots s < n_seqs (the row whose logits each sequence returns: its
// last row in the step), zero rows after. Grid (ceil(N / 256), S). Defines: N (row width), R (rows of x:
// ids are clamped into them).
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read> rows: array<i32>;
@group(0) @binding(3) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let s = gid.y;
  if (c >= {{N}}u) { return; }
  var v = 0.0;
  if (s < P.n_seqs) { v = x[min(u32(rows[s]), {{R}}u - 1u) * {{N}}u + c]; }
  y[s * {{N}}u + c] = v;
}
