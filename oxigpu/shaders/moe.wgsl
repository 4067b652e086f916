// Mixture-of-experts routing and mixing (small next to the expert GEMVs/GEMMs they feed).
// gate: per token row, the top KSEL of softmax(logits) (largest first, ties to the lower id), by KSEL
//   passes over the E logits that each take the next in (value desc, id asc) order, so nothing is stored
//   per expert; their probabilities are renormalized (NORM) and scaled (W_SCALE). Padded rows: id 0, weight 0.
// sum: y[t, c] = sum_j w[t, j] * x[t, j*N + c], the chosen experts' outputs mixed by their weights.
// Defines: T (rows), E (experts), KSEL, NORM (0/1), W_SCALE, N (sum: width of one expert's output).
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> a: array<f32>;
@group(0) @binding(2) var<storage, read> b: array<f32>;
@group(0) @binding(3) var<storage, read_write> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> w: array<f32>;

const MIN_SUM: f32 = 6.103515625e-5;   // the least normal f16, as llama.cpp clamps a renormalizing sum

fn linear_id(wid: vec3<u32>, nwg: vec3<u32>, lid: u32) -> u32 {
  return (wid.y * nwg.x + wid.x) * 64u + lid;
}

@compute @workgroup_size(64)
fn gate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = linear_id(wid, nwg, lid);
  if (t >= {{T}}u) { return; }
  let out = t * {{KSEL}}u;
  if (t >= P.n_tokens) {
    for (var j = 0u; j < {{KSEL}}u; j++) { ids[out + j] = 0; w[out + j] = 0.0; }
    return;
  }
  let base = t * {{E}}u;
  var m = a[base];
  for (var e = 1u; e < {{E}}u; e++) { m = max(m, a[base + e]); }
  var s = 0.0;
  for (var e = 0u; e < {{E}}u; e++) { s += exp(a[base + e] - m); }
  var prev_v = 3.4e38;
  var prev_i = -1;
  var total = 0.0;
  for (var j = 0u; j < {{KSEL}}u; j++) {
    var best_v = 0.0;
    var best_i = -1;
    for (var e = 0u; e < {{E}}u; e++) {
      let v = a[base + e];
      let after = v < prev_v || (v == prev_v && i32(e) > prev_i);
      if (after && (best_i < 0 || v > best_v)) { best_v = v; best_i = i32(e); }
    }
    let p = exp(best_v - m) / s;
    ids[out + j] = max(best_i, 0);
    w[out + j] = p;
    total += p;
    prev_v = best_v;
    prev_i = best_i;
  }
  var k = {{W_SCALE}};
  if ({{NORM}}u == 1u) { k = k / max(total, MIN_SUM); }
  for (var j = 0u; j < {{KSEL}}u; j++) { w[out + j] = w[out + j] * k; }
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
  w[i] = acc;
}
