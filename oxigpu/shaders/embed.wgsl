// Embedding gather from a quantized table: y[t] = dequant(table[ids[t]]) * scale; padded rows
// (t >= n_tokens) and ids outside the table are zero. One thread per 8 output values (one dq8 chunk).
// Tables beyond the storage-binding limit are bound in row ranges, one dispatch per range; the range
// [dims.row0, dims.row1) is what this dispatch's W holds, and only the `first` dispatch writes zeros.
// Defines: QUANT (snippet name), T, DIM (row width, a multiple of the block size), SCALE.
#include "common/params.wgsl"

struct EmbedDims { row0: u32, row1: u32, first: u32, vocab: u32 }
@group(0) @binding(1) var<uniform> dims: EmbedDims;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
@group(0) @binding(4) var<storage, read_write> y: array<vec4<f32>>;

#include "quant/{{QUANT}}.wgsl"

const CHUNKS: u32 = {{DIM}}u / 8u;       // dq8 chunks per row
const ROW_BYTES: u32 = {{DIM}}u / QK * QB;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{T}}u * CHUNKS) { return; }
  let t = id / CHUNKS;
  let ci = id % CHUNKS;
  let tok = ids[t];
  let valid = t < P.n_tokens && tok >= 0 && u32(tok) < dims.vocab;
  if (valid && u32(tok) >= dims.row0 && u32(tok) < dims.row1) {
    let cpb = QK / 8u;                   // chunks per block
    let blk = (u32(tok) - dims.row0) * ROW_BYTES + (ci / cpb) * QB;
    let v = dq8(blk, ci % cpb);
    y[2u * id] = v.a * {{SCALE}};
    y[2u * id + 1u] = v.b * {{SCALE}};
  } else if (!valid && dims.first != 0u) {
    y[2u * id] = vec4<f32>(0.0);
    y[2u * id + 1u] = vec4<f32>(0.0);
  }
}
