// y[t] = x[t] + table[r] for the valid rows (t < n_tokens), r = ROW, or positions[t] when ROW is -1
// (token-type and absolute position embeddings); padded rows copy x. One thread per 8 values (one dq8
// chunk). Defines: QUANT (the table's snippet), T, DIM (a multiple of the block), ROW (0 for positions),
// BY_POS (1: row positions[t], bound at 4), M (table rows).
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> W: array<u32>;
@group(0) @binding(3) var<storage, read_write> y: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read> positions: array<i32>;   // BY_POS only (else x is bound here)

#include "quant/{{QUANT}}.wgsl"

const CHUNKS: u32 = {{DIM}}u / 8u;
const ROW_BYTES: u32 = {{DIM}}u / QK * QB;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{T}}u * CHUNKS) { return; }
  let t = id / CHUNKS;
  let ci = id % CHUNKS;
  var a = x[2u * id];
  var b = x[2u * id + 1u];
  var r = {{ROW}}u;
  if ({{BY_POS}}u == 1u) { r = u32(positions[t]); }
  if (t < P.n_tokens && r < {{M}}u) {
    let v = dq8(r * ROW_BYTES + (ci / (QK / 8u)) * QB, ci % (QK / 8u));
    a += v.a;
    b += v.b;
  }
  y[2u * id] = a;
  y[2u * id + 1u] = b;
}
