// Mixture-of-experts routing and mixing (small next to the expert GEMVs/GEMMs they feed).
// gate: per token row (a workgroup each), the top KSEL of softmax(logits) (largest first, ties to the lower
//   id), by KSEL passes over the E logits that each take the next in (value desc, id asc) order (each lane
//   its share, then a workgroup reduction), so nothing is stored per expert; their probabilities are
//   renormalized (NORM) and scaled (W_SCALE). Padded rows: id 0, weight 0.
// sum: y[t, c] = sum_j w[t, j] * x[t, j*N + c], the chosen experts' outputs mixed by their weights (plus
//   res[t, c] with HAS_RES: moe_sum_add).
// Defines: T (rows), E (experts), KSEL, NORM (0/1), W_SCALE, N (sum: width of one expert's output), HAS_RES.
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> w: array<f32>;
@group(0) @binding(5) var<storage, read> res: array<f32>;   // sum with HAS_RES (moe_sum_add): the residual

const MIN_SUM: f32 = 6.103515625e-5;   // the least normal f16, as llama.cpp clamps a renormalizing sum

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 64u + lid;
}

var<workgroup> rv: array<f32, 64>;
var<workgroup> ri: array<i32, 64>;

// The best of the 64 lanes' (value, id) candidates (value desc, then id asc; id -1: none), in every lane.
// Called in uniform control flow (barriers).
fn best_of(lid: u32, v: f32, i: i32) -> vec2<f32> {
  rv[lid] = v;
  ri[lid] = i;
  workgroupBarrier();
  for (var h = 32u; h > 0u; h >>= 1u) {
    if (lid < h) {
      let bv = rv[lid + h];
      let bi = ri[lid + h];
      let ai = ri[lid];
      if (bi >= 0 && (ai < 0 || bv > rv[lid] || (bv == rv[lid] && bi < ai))) { rv[lid] = bv; ri[lid] = bi; }
    }
    workgroupBarrier();
  }
  let r = vec2<f32>(rv[0], bitcast<f32>(ri[0]));
  workgroupBarrier();   // everyone has read before the next call writes
  return r;
}

// The sum of the 64 lanes' v, in every lane (uniform control flow).
fn sum_of(lid: u32, v: f32) -> f32 {
  rv[lid] = v;
  workgroupBarrier();
  for (var h = 32u; h > 0u; h >>= 1u) {
    if (lid < h) { rv[lid] += rv[lid + h]; }
    workgroupBarrier();
  }
  let r = rv[0];
  workgroupBarrier();
  return r;
}

// One workgroup per token row: its 64 lanes split the E logits (a decode step's routing is one row, so a
// thread per row would leave it to one lane's E KSEL serial steps).
@compute @workgroup_size(64)
fn gate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = wid.y * nwg.x + wid.x;
  if (t >= {{T}}u) { return; }   // uniform per workgroup
  let out = t * {{KSEL}}u;
  if (t >= P.n_tokens) {
    for (var j = lid; j < {{KSEL}}u; j += 64u) { ids[out + j] = 0; w[out + j] = 0.0; }
    return;
  }
  let base = t * {{E}}u;
  var m = -3.4e38;
  for (var e = lid; e < {{E}}u; e += 64u) { m = max(m, a[base + e]); }
  m = best_of(lid, m, i32(min(lid, {{E}}u))).x;
  var s = 0.0;
  for (var e = lid; e < {{E}}u; e += 64u) { s += exp(a[base + e] - m); }
  s = sum_of(lid, s);
  var prev_v = 3.4e38;
  var prev_i = -1;
  var total = 0.0;
  for (var j = 0u; j < {{KSEL}}u; j++) {
    // this lane's next candidate after (prev_v, prev_i) in (value desc, id asc) order, then the best of all
    var best_v = 0.0;
    var best_i = -1;
    for (var e = lid; e < {{E}}u; e += 64u) {
      let v = a[base + e];
      let after = v < prev_v || (v == prev_v && i32(e) > prev_i);
      if (after && (best_i < 0 || v > best_v)) { best_v = v; best_i = i32(e); }
    }
    let b = best_of(lid, best_v, best_i);
    prev_v = b.x;
    prev_i = bitcast<i32>(b.y);
    let p = exp(prev_v - m) / s;
    if (lid == 0u) { ids[out + j] = max(prev_i, 0); w[out + j] = p; }
    total += p;
  }
  var k = {{W_SCALE}};
  if ({{NORM}}u == 1u) { k = k / max(total, MIN_SUM); }
  if (lid == 0u) {
    for (var j = 0u; j < {{KSEL}}u; j++) { w[out + j] = w[out + j] * k; }
  }
}

@compute @workgroup_size(64)
fn sum(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
       @builtin(local_invocation_index) lid: u32) {
  let i = linear_id(wid, nwg, lid);
  if (i >= {{T}}u * {{N}}u) { return; }
  let t = i / {{N}}u;
  let c = i % {{N}}u;
  var acc = 0.0;
  for (var j = 0u; j < {{KSEL}}u; j++) {
    acc += b[t * {{KSEL}}u + j] * a[(t * {{KSEL}}u + j) * {{N}}u + c];
  }
  if ({{HAS_RES}}) { acc = res[i] + acc; }
  w[i] = acc;
}
