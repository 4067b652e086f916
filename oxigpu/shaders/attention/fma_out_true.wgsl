// attention.wgsl's prefill output where a row block's keys are cut into units (attention/units.wgsl): each
// unit's O (against its running maximum m, not divided by l), m and l to `part`, for
// attention_merge_units.wgsl. Layout as attention/mma_out_true.wgsl's: O [unit][t * NH + h][DV], then
// (m, l) [unit][t * NH + h].
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
const TRW: u32 = {{TRW}}u;    // rows of the output: T * NH

fn store_o(rg: u32, kvh: u32, c4: u32, o: vec4<f32>, l: f32) {
  if (rg >= ROWS) { return; }
  let i = (unit * TRW + (rg / G) * NH + kvh * G + rg % G) * DV4 * 4u + 4u * c4;
  part[i] = o.x;
  part[i + 1u] = o.y;
  part[i + 2u] = o.z;
  part[i + 3u] = o.w;
}

fn store_ml(rg: u32, kvh: u32, m: f32, l: f32) {
  if (rg >= ROWS) { return; }
  let i = NU * TRW * DV4 * 4u + 2u * (unit * TRW + (rg / G) * NH + kvh * G + rg % G);
  part[i] = m;
  part[i + 1u] = l;
}
