// attention_mma.wgsl's output where a row block's keys are cut into units of KU keys (fixed positions:
// keys [u KU, (u + 1) KU)), one workgroup each, so that long contexts fill the GPU: each unit's O (against
// its reference maximum m, not divided by l) and its m and l go to `part`; attention_merge_units.wgsl
// folds a row's units in order. Layout: O [unit][t * NH + h][DV], then (m, l) [unit][t * NH + h].
@group(0) @binding(5) var<storage, read_write> part: array<f32>;
const TRW: u32 = {{TRW}}u;    // rows of the output: T * NH

fn put_out(t: u32, h: u32, c: u32, v: f32, inv: f32) { part[(unit * TRW + t * NH + h) * DV + c] = v; }

fn put_ml(t: u32, h: u32, m: f32, l: f32) {
  let i = NU * TRW * DV + 2u * (unit * TRW + t * NH + h);
  part[i] = m;
  part[i + 1u] = l;
}
