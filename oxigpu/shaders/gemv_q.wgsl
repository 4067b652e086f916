// Quantized GEMV for decode: y[n] = sum_k x[k] * W[n, k] (+ bias), x one row, W raw GGUF blocks.
// A workgroup is GPW groups of TPR lanes; a group computes R consecutive output rows. Its lanes take
// consecutive "pieces" of the row (gemv/<piece>.wgsl: a fixed part of a block, loaded with as few and
// as wide loads as its layout allows), so a warp streams contiguous bytes; each lane loads the x values
// of its piece once and applies them to all R rows. Totals: gemv/reduce_{sg,wg}.wgsl.
// Defines: QUANT, PIECE, HAS_BIAS, TPR, R, GPW, REDUCE, MAGIC, PPB32 (see ops/matmul.py).
#include "common/matmul_io.wgsl"
#include "quant/{{QUANT}}.wgsl"
#include "gemv/common.wgsl"
#include "gemv/{{PIECE}}.wgsl"

const TPR: u32 = {{TPR}}u;
const R: u32 = {{R}}u;
const GPW: u32 = {{GPW}}u;
const WG: u32 = TPR * GPW;

#include "gemv/reduce_{{REDUCE}}.wgsl"

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let grp = lane.lid / TPR;
  let gl = lane.lid % TPR;
  let r0 = ((wid.y * nwg.x + wid.x) * GPW + grp) * R;
  var rb: array<u32, R>;
  var acc: array<f32, R>;
  for (var r = 0u; r < R; r++) { rb[r] = min(r0 + r, D.rows - 1u) * D.row_bytes; }
  let np = D.k / QK * PPB;
  for (var p = gl; p < np; p += TPR) {
    let b = p / PPB;
    let i = p % PPB;
    var xs: array<vec4<f32>, PX>;
    for (var j = 0u; j < PX; j++) { xs[j] = X[(b * QK + gx(i, j)) >> 2u]; }
    for (var r = 0u; r < R; r++) { acc[r] += gdot(rb[r] + b * QB, i, xs); }
  }
  // Never true (the host writes 0): keeps both views of the weights in the auto bind-group layout.
  if (D._p0 == 0xFFFFFFFFu) { acc[0] += f32(W[0] ^ W4[0].x); }
  let t = group_sum(lane, grp, gl, acc);
  if (gl < R && r0 + gl < D.rows) {
    let col = D.col0 + r0 + gl;
    Y[col] = t + bias_at(col);
  }
}
