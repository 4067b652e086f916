// Mixture-of-experts routing: the top KSEL of softmax(logits) per token row (largest first, ties to the
// lower id), their probabilities renormalized (NORM) and scaled (W_SCALE); padded rows: id 0, weight 0.
// gate:  logits given (lg), a workgroup per token row.
// route: the row's RMS norm, the router GEMV and the gate in one dispatch (decode): WPT workgroups per token
//   each dot RPW router rows with x * g (the norm's scale factors out of the dot, so one reduction gives the
//   sum of squares and the rows' dots), the first also stores h = rms_norm(x) for the experts; the token's
//   last workgroup to finish (atomic counter, as attention_decode.wgsl merges its splits) runs the gate.
// The gate ranks each expert against all E logits in workgroup memory (a lane per expert): two barriers,
// where a serial top-k needs a workgroup reduction per pick.
// Defines: T, E, KSEL, NORM (0/1), W_SCALE, WG, RED (sg | wg); route: D (row width, a multiple of 8), RPW,
//   EPS, WF16 (router weights F16: 1, F32: 0).
#include "common/params.wgsl"

const WG: u32 = {{WG}}u;
const E: u32 = {{E}}u;
const K: u32 = {{KSEL}}u;
const RPW: u32 = {{RPW}}u;
const WPT: u32 = (E + RPW - 1u) / RPW;        // workgroups per token (route)
const ROWS: u32 = RPW + 1u;                   // reduced per workgroup: the sum of squares, RPW dots
const D: u32 = {{D}}u;
const NCH: u32 = D / 8u;                      // 8-element chunks per row
const NCPL: u32 = (NCH + WG - 1u) / WG;       // chunks per lane
const WF16: bool = {{WF16}}u == 1u;
const MIN_SUM: f32 = 6.103515625e-5;   // the least normal f16, as llama.cpp clamps a renormalizing sum
#include "common/reduce_{{RED}}.wgsl"

@group(0) @binding(1) var<storage, read> x: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> wr: array<vec4<u32>>;   // F32 rows (bitcast) or F16 rows
@group(0) @binding(3) var<storage, read_write> ids: array<i32>;
@group(0) @binding(4) var<storage, read_write> w: array<f32>;
@group(0) @binding(5) var<storage, read> g: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> h: array<vec4<f32>>;
@group(0) @binding(7) var<storage, read_write> lg: array<f32>;
@group(0) @binding(8) var<storage, read_write> counters: array<atomic<u32>>;

var<workgroup> lv: array<f32, E>;
var<workgroup> ex: array<f32, E>;
var<workgroup> sel: array<u32, K>;     // zero-initialized: an id in range whatever the logits (NaN)
var<workgroup> tot: array<f32, ROWS>;
var<workgroup> last_w: u32;

// ids/w of token t from its logits in lv (stored, then a barrier); uniform control flow.
fn gate_row(t: u32, lid: u32) {
  let out = t * K;
  if (t >= P.n_tokens) {             // uniform per workgroup
    for (var j = lid; j < K; j += WG) { ids[out + j] = 0; w[out + j] = 0.0; }
    return;
  }
  for (var e = lid; e < E; e += WG) {
    let v = lv[e];
    var m = v;
    var r = 0u;                        // experts before e in (value desc, id asc) order
    for (var j = 0u; j < E; j++) {
      let u = lv[j];
      m = max(m, u);
      r += select(0u, 1u, u > v || (u == v && j < e));
    }
    if (r < K) { sel[r] = e; }
    ex[e] = exp(v - m);
  }
  workgroupBarrier();
  var s = 0.0;
  for (var j = 0u; j < E; j++) { s += ex[j]; }
  var total = 0.0;
  for (var j = 0u; j < K; j++) { total += ex[sel[j]] / s; }
  var k = {{W_SCALE}};
  if ({{NORM}}u == 1u) { k = k / max(total, MIN_SUM); }
  for (var j = lid; j < K; j += WG) {
    let e = sel[j];
    ids[out + j] = i32(e);
    w[out + j] = ex[e] / s * k;
  }
}

@compute @workgroup_size({{WG}})
fn gate(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let t = wid.y * nwg.x + wid.x;
  if (t >= {{T}}u) { return; }       // uniform per workgroup
  for (var e = lid; e < E; e += WG) { lv[e] = lg[t * E + e]; }
  workgroupBarrier();
  gate_row(t, lid);
}

// Router row e's dot over chunk c (8 elements) with xg (x * g of that chunk).
fn wdot(e: u32, c: u32, xa: vec4<f32>, xb: vec4<f32>) -> f32 {
  if (WF16) {
    let q = wr[e * NCH + c];
    let wa = vec4<f32>(unpack2x16float(q.x), unpack2x16float(q.y));
    let wb = vec4<f32>(unpack2x16float(q.z), unpack2x16float(q.w));
    return dot(wa, xa) + dot(wb, xb);
  }
  let i = 2u * (e * NCH + c);
  return dot(bitcast<vec4<f32>>(wr[i]), xa) + dot(bitcast<vec4<f32>>(wr[i + 1u]), xb);
}

@compute @workgroup_size({{WG}})
fn route(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let gid = wid.y * nwg.x + wid.x;
  if (gid >= {{T}}u * WPT) { return; }   // uniform per workgroup
  let lid = lane.lid;
  let t = gid / WPT;
  let r0 = (gid % WPT) * RPW;
  let xrow = t * 2u * NCH;
  var acc: array<f32, ROWS>;            // [0]: sum of x^2; [1 + r]: row r0 + r . (x * g)
  for (var i = 0u; i < ROWS; i++) { acc[i] = 0.0; }
  for (var i = 0u; i < NCPL; i++) {
    let c = lid + i * WG;
    if (c < NCH) {
      let xa = x[xrow + 2u * c];
      let xb = x[xrow + 2u * c + 1u];
      acc[0] += dot(xa, xa) + dot(xb, xb);
      let ga = xa * g[2u * c];
      let gb = xb * g[2u * c + 1u];
      for (var r = 0u; r < RPW; r++) {
        acc[1u + r] += wdot(min(r0 + r, E - 1u), c, ga, gb);   // rows past E: computed, never stored
      }
    }
  }
  let s = sum_rows(lane, acc);
  if (lid < ROWS) { tot[lid] = s; }
  workgroupBarrier();
  let inv = inverseSqrt(tot[0] / f32(D) + {{EPS}});
  if (r0 == 0u) {                        // uniform: the token's first workgroup writes the normed row
    for (var i = 0u; i < NCPL; i++) {
      let c = lid + i * WG;
      if (c < NCH) {
        h[xrow + 2u * c] = x[xrow + 2u * c] * inv * g[2u * c];
        h[xrow + 2u * c + 1u] = x[xrow + 2u * c + 1u] * inv * g[2u * c + 1u];
      }
    }
  }
  if (WPT == 1u) {                       // one workgroup holds every logit: no counter
    if (lid >= 1u && lid < ROWS && lid - 1u < E) { lv[lid - 1u] = tot[lid] * inv; }
    workgroupBarrier();
    gate_row(t, lid);
    return;
  }
  if (lid >= 1u && lid < ROWS && r0 + lid - 1u < E) { lg[t * E + r0 + lid - 1u] = tot[lid] * inv; }
  storageBarrier();
  if (lid == 0u) { last_w = atomicAdd(&counters[t], 1u); }
  if (workgroupUniformLoad(&last_w) != WPT - 1u) { return; }
  storageBarrier();
  for (var e = lid; e < E; e += WG) { lv[e] = lg[t * E + e]; }
  workgroupBarrier();
  gate_row(t, lid);
  if (lid == 0u) { atomicStore(&counters[t], 0u); }
}
