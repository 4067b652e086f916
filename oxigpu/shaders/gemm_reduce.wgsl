// Second pass of the split-k GEMMs (common/split_k.wgsl): Y[m, col0 + c] = sum over z of
// PS[z][m][c] (+ bias, + residual, multi-output segments: common/matmul_io.wgsl's store), the partial sums
// added in z order so results are deterministic. One thread per output; grid (ceil(rows / 256), m); rows
// at or past the step's n_tokens (padding) are skipped.
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

@group(0) @binding(6) var<storage, read> PS: array<f32>;

const SPLITS: u32 = {{SPLITS}}u;

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let m = gid.y;
  if (c >= D.rows || m >= D.m || m >= P.n_tokens) { return; }
  var v = 0.0;
  for (var z = 0u; z < SPLITS; z++) { v += PS[(z * D.m + m) * D.rows + c]; }
  store(m, D.col0 + c, v);
}
