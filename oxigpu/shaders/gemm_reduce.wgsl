// Second pass of the split-k GEMMs (common/split_k.wgsl): Y[m, col0 + c] = sum over z of
// PS[z][m][c] (+ bias, + residual, multi-output segments: common/matmul_io.wgsl's store), the partial sums
// added in z order so results are deterministic. One thread per output; grid (ceil(outputs / 256), m); rows
// at or past the step's n_tokens (padding) are skipped. GLU (matmul_glu's split-k GEMM over D.n gate rows
// then D.n up rows, one row range): output c is ACT(gate sum c) * (up sum D.n + c), so the gate and up
// products meet here instead of in the GEMM's epilogue.
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "math.wgsl"

@group(0) @binding(6) var<storage, read> PS: array<f32>;

const SPLITS: u32 = {{SPLITS}}u;
const GLU: bool = {{GLU}};

fn act(v: f32) -> f32 { return {{ACT}}(v); }

@compute @workgroup_size(256)
fn main(@builtin(global_invocation_id) gid: vec3<u32>) {
  let c = gid.x;
  let m = gid.y;
  if (c >= select(D.rows, D.n, GLU) || m >= D.m || m >= P.n_tokens) { return; }
  var v = 0.0;
  for (var z = 0u; z < SPLITS; z++) { v += PS[(z * D.m + m) * D.rows + c]; }
  if (GLU) {
    var u = 0.0;
    for (var z = 0u; z < SPLITS; z++) { u += PS[(z * D.m + m) * D.rows + D.n + c]; }
    store(m, c, act(v) * u);
    return;
  }
  store(m, D.col0 + c, v);
}
