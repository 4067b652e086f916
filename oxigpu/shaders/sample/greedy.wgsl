// Greedy sampling (temperature 0) in ONE dispatch of one workgroup: the token sampling.py takes first
// (logit desc, id asc, NaN last) after the logit bias and the penalties, with no sorts and no lists
// between dispatches (the sort path, sample.wgsl, needs three dependent dispatches for this).
// 1. the penalty window's distinct tokens and 2. the bias ids outside it are scored on their own and
//    marked in a workgroup bitmap of the vocabulary (one bit per id);
// 3. a sweep over the vocabulary skips marked ids: vec4 loads, four in flight per invocation (one
//    workgroup reads the 0.5-1 MB of logits the LM head has just left in L2);
// 4. a tree reduction of the invocations' best, then the token and the ring writes (sample/common.wgsl).
// Everything stays inside one workgroup, so workgroup barriers order it (storageBarrier for the ring:
// its reads in 1. come before its writes in 4.).
// Defines: V, V4 (= V / 4), NW (bitmap words = ceil(V / 32)), CAP, NB.
#include "sample/common.wgsl"

@group(0) @binding(9) var<storage, read> logits4: array<vec4<f32>>;   // the same buffer as `logits`

const WG: u32 = 1024u;
const V4: u32 = {{V4}}u;

var<workgroup> marks: array<atomic<u32>, {{NW}}>;
var<workgroup> rv: array<f32, WG>;
var<workgroup> ri: array<u32, WG>;

struct Best { v: f32, i: u32 }

// (v, i) goes before b: sampling.py's order; a NaN goes before nothing, anything else before the empty
// entry (id PAD_ID; it stays only where every logit is NaN, and then id 0 is sampling.py's token).
fn beats(v: f32, i: u32, b: Best) -> bool {
  if (b.i == PAD_ID) { return i != PAD_ID && !is_nan(v); }
  return before(v, i, b.v, b.i);
}

fn take(b: Best, v: f32, i: u32) -> Best {
  if (beats(v, i, b)) { return Best(v, i); }
  return b;
}

// b with ids 4q .. 4q+3 (values x) but the marked ones. An invocation sweeps its ids in increasing
// order, so a strict > keeps the lowest id of equal logits, as before() would.
fn take4(b: Best, x: vec4<f32>, q: u32) -> Best {
  let m = (atomicLoad(&marks[q / 8u]) >> ((q % 8u) * 4u)) & 0xFu;
  var o = b;
  if (m == 0u) {
    if (x.x > o.v || (o.i == PAD_ID && !is_nan(x.x))) { o = Best(x.x, 4u * q); }
    if (x.y > o.v || (o.i == PAD_ID && !is_nan(x.y))) { o = Best(x.y, 4u * q + 1u); }
    if (x.z > o.v || (o.i == PAD_ID && !is_nan(x.z))) { o = Best(x.z, 4u * q + 2u); }
    if (x.w > o.v || (o.i == PAD_ID && !is_nan(x.w))) { o = Best(x.w, 4u * q + 3u); }
  } else {
    for (var k = 0u; k < 4u; k++) {
      if ((m & (1u << k)) == 0u) { o = take(o, x[k], 4u * q + k); }
    }
  }
  return o;
}

// The bias of id t (0 without one; bias ids are unique).
fn bias_of(t: i32) -> f32 {
  for (var b = 0u; b < {{NB}}u; b++) {
    if (bias_ids[b] == t) { return bias_vals[b]; }
  }
  return 0.0;
}

@compute @workgroup_size(1024)
fn main(@builtin(local_invocation_index) lid: u32) {
  for (var w = lid; w < {{NW}}u; w += WG) { atomicStore(&marks[w], 0u); }
  workgroupBarrier();
  var best = Best(0.0, PAD_ID);     // of the scored ids (1., 2.)
  // 1. penalized tokens (biased first), scored at their first occurrence in the window
  let w = penalty_window();
  for (var e = lid; e < w.y; e += WG) {
    let t = token_at(w.x - w.y + e);
    if (t >= 0 && u32(t) < {{V}}u) {
      atomicOr(&marks[u32(t) / 32u], 1u << (u32(t) % 32u));
      let count = first_count(e, w, t);
      if (count > 0u) { best = take(best, penalize(logits[u32(t)] + bias_of(t), count), u32(t)); }
    }
  }
  workgroupBarrier();
  // 2. biased tokens the window does not hold (the bit tells: set in 1., or by this id alone here)
  for (var b = lid; b < {{NB}}u; b += WG) {
    let t = bias_ids[b];
    if (t >= 0 && u32(t) < {{V}}u) {
      let bit = 1u << (u32(t) % 32u);
      if ((atomicOr(&marks[u32(t) / 32u], bit) & bit) == 0u) {
        best = take(best, logits[u32(t)] + bias_vals[b], u32(t));
      }
    }
  }
  workgroupBarrier();
  // 3. every other id (clamped loads past the end repeat the last vec4: taking it twice changes nothing)
  var sweep = Best(0.0, PAD_ID);
  for (var q = lid; q < V4; q += 4u * WG) {
    let j = min(vec4<u32>(q) + vec4<u32>(0u, WG, 2u * WG, 3u * WG), vec4<u32>(V4 - 1u));
    let x0 = logits4[j.x];
    let x1 = logits4[j.y];
    let x2 = logits4[j.z];
    let x3 = logits4[j.w];
    sweep = take4(take4(take4(take4(sweep, x0, j.x), x1, j.y), x2, j.z), x3, j.w);
  }
  best = take(best, sweep.v, sweep.i);
  let tail = 4u * V4 + lid;             // the last V % 4 ids
  if (tail < {{V}}u && (atomicLoad(&marks[tail / 32u]) & (1u << (tail % 32u))) == 0u) {
    best = take(best, logits[tail], tail);
  }
  // 4. the workgroup's best
  rv[lid] = best.v;
  ri[lid] = best.i;
  workgroupBarrier();
  for (var s = WG / 2u; s > 0u; s >>= 1u) {
    if (lid < s && beats(rv[lid + s], ri[lid + s], Best(rv[lid], ri[lid]))) {
      rv[lid] = rv[lid + s];
      ri[lid] = ri[lid + s];
    }
    workgroupBarrier();
  }
  storageBarrier();
  record(lid, WG, select(ri[0], 0u, ri[0] == PAD_ID));
}
