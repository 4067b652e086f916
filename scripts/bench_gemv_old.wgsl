// Quantized GEMV for decode: y[n] = sum_k x[k] * W[n, k] (+ bias), x one row, W raw GGUF blocks.
// One workgroup computes ROWS output columns; its WG threads stride over the k dimension in chunks of
// 8 elements (consecutive threads read consecutive bytes of a row), x is read once per chunk for all
// ROWS rows, and the partial sums are reduced by subgroups or shared memory (REDUCE = sg | wg).
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"
#include "common/reduce_{{REDUCE}}.wgsl"

const WG: u32 = {{WG}}u;
const ROWS: u32 = {{ROWS}}u;
const CPB: u32 = QK / 8u;  // 8-element chunks per block

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let r0 = (wid.y * nwg.x + wid.x) * ROWS;
  var acc: array<f32, ROWS>;
  for (var c = lane.lid; c < D.k / 8u; c += WG) {
    let xa = X[2u * c];
    let xb = X[2u * c + 1u];
    let boff = (c / CPB) * QB;
    for (var r = 0u; r < ROWS; r++) {
      let v = dq8(min(r0 + r, D.rows - 1u) * D.row_bytes + boff, c % CPB);
      acc[r] += dot(v.a, xa) + dot(v.b, xb);
    }
  }
  let t = sum_rows(lane, acc);
  if (lane.lid < ROWS && r0 + lane.lid < D.rows) {
    let col = D.col0 + r0 + lane.lid;
    Y[col] = t + bias_at(col);
  }
}
