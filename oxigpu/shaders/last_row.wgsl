// last_row: y[0, c] = x[n_tokens - 1, c] (the row whose logits a padded prefill chunk samples from).
// Defines: N (row width).
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> x: array<f32>;
@group(0) @binding(2) var<storage, read_write> y: array<f32>;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  if (c < {{N}}u) { y[c] = x[(max(P.n_tokens, 1u) - 1u) * {{N}}u + c]; }
}
