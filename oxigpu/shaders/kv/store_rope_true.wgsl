// kv_store_q.wgsl's hooks for rope_kv_store: q rotated into y, k rotated as it is quantized
// (common/rope.wgsl, as rope_kv.wgsl does).
#include "common/rope.wgsl"

@group(0) @binding(8) var<storage, read> q: array<f32>;
@group(0) @binding(9) var<storage, read> ff: array<f32>;
@group(0) @binding(10) var<storage, read_write> y: array<f32>;

const HP: u32 = {{HD}}u / 2u;

// Pair id of the q rows: rotated into y.
fn rope_q(id: u32) {
  let row_head = id / HP;
  let e = row_head * {{HD}}u + rope_pair(id % HP);
  let r = rope_rotate(pos_of(row_head / {{NH}}u), id % HP, vec2<f32>(q[e.x], q[e.y]));
  y[e.x] = r.x;
  y[e.y] = r.y;
}

// Value e of the k row starting at b, rotated at position p.
fn k_value(b: u32, e: u32, p: u32) -> f32 {
  let h = b + (e / {{HD}}u) * {{HD}}u;
  let i = e % {{HD}}u;
  return rope_elem(p, i, k[h + i], k[h + rope_partner(i)]);
}
