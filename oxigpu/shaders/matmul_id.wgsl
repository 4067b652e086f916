// Mixture-of-experts matrix-vector products, for decode: y[p*N + r] = W[ids[p]][r] . x_p for every
// (token t, slot j) pair p = t*KSEL + j, where x_p is x's row t (XSLOT 0) or row p (XSLOT 1: one input
// per chosen expert, the down projection). One workgroup per ROWS rows of one pair; only the chosen
// experts' rows are read. Padded pairs (t >= n_tokens) write zeros.
// Defines: QUANT, K_IN (row length, a multiple of the block), N (rows per expert), E, KSEL, XSLOT, WG,
// ROWS, RED ("sg" | "wg").
#include "common/params.wgsl"
const WG: u32 = {{WG}}u;
const ROWS: u32 = {{ROWS}}u;
#include "common/reduce_{{RED}}.wgsl"

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> y: array<f32>;

#include "quant/{{QUANT}}.wgsl"

const CHUNKS: u32 = {{K_IN}}u / 8u;
const CPB: u32 = QK / 8u;
const ROW_BYTES: u32 = {{K_IN}}u / QK * QB;

@compute @workgroup_size({{WG}})
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>) {
  let pair = wid.y;
  let t = pair / {{KSEL}}u;
  let r0 = wid.x * ROWS;
  let live = t < P.n_tokens;         // uniform per workgroup: the reduction's barriers stay uniform
  var acc: array<f32, ROWS>;
  for (var r = 0u; r < ROWS; r++) { acc[r] = 0.0; }
  if (live) {
    let e = min(u32(max(ids[pair], 0)), {{E}}u - 1u);
    let xrow = select(t, pair, {{XSLOT}}u == 1u) * (CHUNKS * 2u);
    let ebase = e * {{N}}u * ROW_BYTES;
    for (var c = lane.lid; c < CHUNKS; c += WG) {
      let xa = x[xrow + 2u * c];
      let xb = x[xrow + 2u * c + 1u];
      let off = (c / CPB) * QB;
      for (var r = 0u; r < ROWS; r++) {
        let row = r0 + r;
        if (row < {{N}}u) {
          let v = dq8(ebase + row * ROW_BYTES + off, c % CPB);
          acc[r] += dot(v.a, xa) + dot(v.b, xb);
        }
      }
    }
  }
  let total = sum_rows(lane, acc);
  if (lane.lid < ROWS) {
    let row = r0 + lane.lid;
    if (row < {{N}}u) { y[pair * {{N}}u + row] = select(0.0, total, live); }
  }
}
