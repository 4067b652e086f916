// Token sampling on the device, with exactly the semantics of oxigpu/runtime/sampling.py (read its
// docstring for the filter chain). Three kinds of dispatch:
//   select_first  one workgroup per CH logits: bias + penalties applied in workgroup memory, a bitonic
//                 sort by (logit desc, id asc), the best K written out;
//   select_merge  the same sort over CH entries of the previous pass's lists (repeated until one list);
//   finish        one workgroup, a thread per candidate: greedy / top-p / min-p / temperature / draw
//                 over the K sorted candidates (prefix sums by the same scan numpy emulates), then
//                 writes the token to `token` and the chunk's ids plus the token into the history ring.
// The history ring holds the token at absolute position p in hist[p % CAP]; this step's own input ids
// (positions pos .. pos+n_tokens-1) are read from `ids`, since the ring gets them only at the end
// (`finish`, or the FINAL round).
// With K == 1 (the greedy variant, for temperature 0) the sorts become max-reductions, and the round
// that leaves one list (FINAL: one workgroup) records its best token itself, without `finish`.
// Non-finite logits as sampling.py defines them: NaN counts as -inf; when nothing is above -inf, the token
// written is -1 (PAD_ID), which the runtime turns into an error. Padding entries are -inf with the largest
// id, so they sort after every real id and the candidate list is numpy's.
// Defines: V (vocab), CH (sort size, power of two), K (candidates, power of two <= CH), T (ids),
// CAP (ring size), NB (bias entries; ids < 0 are unused), N_IN (select_merge: entries in), K_MAX, FINAL.
#include "common/params.wgsl"

@group(0) @binding(1) var<storage, read> logits: array<f32>;
@group(0) @binding(2) var<storage, read> ids: array<i32>;
@group(0) @binding(3) var<storage, read_write> hist: array<i32>;
@group(0) @binding(4) var<storage, read> bias_ids: array<i32>;
@group(0) @binding(5) var<storage, read> bias_vals: array<f32>;
@group(0) @binding(8) var<storage, read_write> token: array<i32>;

const PAD_ID: u32 = 0xFFFFFFFFu;

// a sorts before b: larger logit first, lower id first on ties (a strict total order).
fn before(va: f32, ia: u32, vb: f32, ib: u32) -> bool {
  return va > vb || (va == vb && ia < ib);
}

fn is_nan(v: f32) -> bool { return (bitcast<u32>(v) & 0x7FFFFFFFu) > 0x7F800000u; }
fn is_neg_inf(v: f32) -> bool { return bitcast<u32>(v) == 0xFF800000u; }
// -inf, from a runtime value: WGSL refuses an infinite constant expression
fn neg_inf() -> f32 { return bitcast<f32>(0xFF800000u | (P.flags & 0u)); }

// The token at absolute position q (q < pos + n_tokens): this step's own ids are not in the ring yet.
fn token_at(q: u32) -> i32 {
  if (q >= P.pos) { return ids[q - P.pos]; }
  return hist[q % {{CAP}}u];
}

// The penalty window [x - y, x): the last penalty_last_n tokens of the sequence (prompt included).
fn penalty_window() -> vec2<u32> {
  let end = P.pos + P.n_tokens;
  return vec2<u32>(end, min(min(P.penalty_last_n, {{CAP}}u), end));
}

// Occurrences of token t in window w if entry e is its first one there, else 0.
fn first_count(e: u32, w: vec2<u32>, t: i32) -> u32 {
  var count = 0u;
  for (var f = 0u; f < w.y; f++) {
    if (token_at(w.x - w.y + f) == t) {
      if (f < e) { return 0u; }
      count++;
    }
  }
  return count;
}

// A (biased) logit after the penalties of a token seen `count` times (llama.cpp's rule).
fn penalize(v: f32, count: u32) -> f32 {
  var r = v * P.repeat_penalty;
  if (v > 0.0) { r = v / P.repeat_penalty; }
  return r - (f32(count) * P.frequency_penalty + P.presence_penalty);
}

// Thread i of n: the drawn token to `token` and the ring; this step's ids into the ring.
fn record(i: u32, n: u32, tok: u32) {
  if (i == 0u) {
    token[0] = i32(tok);
    hist[(P.pos + P.n_tokens) % {{CAP}}u] = i32(tok);
  }
  for (var t = i; t < P.n_tokens; t += n) { hist[(P.pos + t) % {{CAP}}u] = ids[t]; }
}

@group(0) @binding(6) var<storage, read> cand_in: array<vec2<u32>>;      // (bitcast logit, id)
@group(0) @binding(7) var<storage, read_write> cand_out: array<vec2<u32>>;

const WG: u32 = 1024u;     // the sorts: one compare-exchange per thread per stage (CH = 2048)

var<workgroup> kv: array<f32, {{CH}}>;
var<workgroup> ki: array<u32, {{CH}}>;

// Bitonic sort of kv/ki (best first), from phase `k0`: 2 for arbitrary data; 2 * K when the data is
// already runs of K sorted alternately best-first and best-last (the merge rounds load it that way).
fn bitonic_sort(lid: u32, k0: u32) {
  for (var k = k0; k <= {{CH}}u; k <<= 1u) {
    for (var j = k >> 1u; j > 0u; j >>= 1u) {
      for (var p = lid; p < {{CH}}u / 2u; p += WG) {
        let i = ((p & ~(j - 1u)) << 1u) | (p & (j - 1u));   // j is a power of two
        let l = i + j;
        let want_i_first = (i & k) == 0u;
        if (before(kv[l], ki[l], kv[i], ki[i]) == want_i_first) {
          let tv = kv[i]; kv[i] = kv[l]; kv[l] = tv;
          let ti = ki[i]; ki[i] = ki[l]; ki[l] = ti;
        }
      }
      workgroupBarrier();
    }
  }
}

// Greedy (K == 1): the best entry by the same order, NaN logits last (as numpy's argsort puts them), by a
// tree reduction into kv[0]/ki[0]: 11 barriers for CH = 2048 instead of the sort's 66.
const GREEDY: bool = {{K}}u == 1u;

fn reduce_best(lid: u32) {
  for (var s = {{CH}}u / 2u; s > 0u; s >>= 1u) {
    for (var p = lid; p < s; p += WG) {
      let a = kv[p];
      let b = kv[p + s];
      if (!is_nan(b) && (is_nan(a) || before(b, ki[p + s], a, ki[p]))) { kv[p] = b; ki[p] = ki[p + s]; }
    }
    workgroupBarrier();
  }
}

// The best K entries of the chunk (best first) into the caller's K-list.
fn select_top(lid: u32, k0: u32) {
  if (GREEDY) { reduce_best(lid); } else { bitonic_sort(lid, k0); }
}

// The round's result: the K-list of this workgroup, or (FINAL, K == 1) the token and the ring updates
// (storageBarrier: select_first's penalties read the ring before it is written).
fn write_top(group: u32, lid: u32) {
  if ({{FINAL}}) {
    storageBarrier();
    record(lid, WG, select(ki[0], PAD_ID, is_neg_inf(kv[0])));
  } else {
    for (var i = lid; i < {{K}}u; i += WG) {
      cand_out[group * {{K}}u + i] = vec2<u32>(bitcast<u32>(kv[i]), ki[i]);
    }
  }
}

@compute @workgroup_size(1024)
fn select_first(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  let c0 = wid.x * {{CH}}u;
  let pad = neg_inf();
  for (var i = lid; i < {{CH}}u; i += WG) {
    let g = c0 + i;
    let x = logits[min(g, {{V}}u - 1u)];
    kv[i] = select(pad, select(x, pad, is_nan(x)), g < {{V}}u);
    ki[i] = select(PAD_ID, g, g < {{V}}u);
  }
  workgroupBarrier();
  // 1. logit bias (ids unique), for the ids inside this chunk
  for (var b = lid; b < {{NB}}u; b += WG) {
    let t = bias_ids[b];
    if (t >= 0 && u32(t) >= c0 && u32(t) < c0 + {{CH}}u && u32(t) < {{V}}u) {
      kv[u32(t) - c0] += bias_vals[b];
    }
  }
  workgroupBarrier();
  // 2. penalties: one thread per distinct token (its first occurrence) of the window
  let w = penalty_window();
  for (var e = lid; e < w.y; e += WG) {
    let t = token_at(w.x - w.y + e);
    if (t >= 0 && u32(t) >= c0 && u32(t) < c0 + {{CH}}u && u32(t) < {{V}}u) {
      let count = first_count(e, w, t);
      if (count > 0u) { kv[u32(t) - c0] = penalize(kv[u32(t) - c0], count); }
    }
  }
  workgroupBarrier();
  select_top(lid, 2u);
  write_top(wid.x, lid);
}

@compute @workgroup_size(1024)
fn select_merge(@builtin(workgroup_id) wid: vec3<u32>, @builtin(local_invocation_index) lid: u32) {
  for (var i = lid; i < {{CH}}u; i += WG) {
    // odd runs are loaded reversed, so each pair of runs is a bitonic sequence
    let q = i % {{K}}u;
    let g = wid.x * {{CH}}u + i - q + select(q, {{K}}u - 1u - q, (i / {{K}}u) % 2u == 1u);
    let c = cand_in[min(g, {{N_IN}}u - 1u)];
    kv[i] = select(neg_inf(), bitcast<f32>(c.x), g < {{N_IN}}u);
    ki[i] = select(PAD_ID, c.y, g < {{N_IN}}u);
  }
  workgroupBarrier();
  select_top(lid, 2u * {{K}}u);
  write_top(wid.x, lid);
}

// The RNG of sampling.py: (pcg(pcg(seed) + counter) >> 8) / 2^24.
fn pcg_hash(x: u32) -> u32 {
  let state = x * 747796405u + 2891336453u;
  let word = ((state >> ((state >> 28u) + 4u)) ^ state) * 277803737u;
  return (word >> 22u) ^ word;
}

fn uniform01(seed: u32, counter: u32) -> f32 {
  return f32(pcg_hash(pcg_hash(seed) + counter) >> 8u) * (1.0 / 16777216.0);
}

var<workgroup> sv: array<f32, {{K}}>;      // candidate logits, then the scanned weights
var<workgroup> first_hit: atomic<u32>;
var<workgroup> hits: atomic<u32>;

// Inclusive Hillis-Steele scan of sv (sampling.py's _scan performs the same f32 additions).
fn scan(i: u32) {
  for (var off = 1u; off < {{K}}u; off <<= 1u) {
    var t = sv[i];
    if (i >= off) { t = t + sv[i - off]; }
    workgroupBarrier();
    sv[i] = t;
    workgroupBarrier();
  }
}

// Index of the first candidate whose scanned weight passes `goal` (strict: >, else >=); `none` if none.
fn first_index(i: u32, n: u32, goal: f32, strict: bool, none: u32) -> u32 {
  atomicStore(&first_hit, none);
  workgroupBarrier();
  if (i < n && ((strict && sv[i] > goal) || (!strict && sv[i] >= goal))) { atomicMin(&first_hit, i); }
  workgroupBarrier();
  return atomicLoad(&first_hit);
}

// One thread per candidate: top-p / min-p counts from a scan and atomics, the draw from a second scan.
@compute @workgroup_size({{K}})
fn finish(@builtin(local_invocation_index) i: u32) {
  var k = {{K_MAX}}u;
  if (P.top_k > 0u && P.top_k < {{K_MAX}}u) { k = P.top_k; }
  k = min(k, {{V}}u);
  let lmax = bitcast<f32>(cand_in[0].x);
  let li = bitcast<f32>(cand_in[i].x);
  var tok = select(cand_in[0].y, PAD_ID, is_neg_inf(lmax));   // nothing drawable: -1
  // numpy's isfinite on the exponent bits (uniform across the group): `x - x == 0` is folded to true by
  // drivers that assume finite floats, so an infinite top logit would be drawn from instead of taken
  if (P.temperature > 0.0 && (bitcast<u32>(lmax) & 0x7F800000u) != 0x7F800000u) {
    var n = k;
    if (P.top_p < 1.0) {
      sv[i] = select(0.0, exp(li - lmax), i < k);
      workgroupBarrier();
      scan(i);
      n = first_index(i, k, P.top_p * sv[k - 1u], false, k - 1u) + 1u;
    }
    if (P.min_p > 0.0) {
      atomicStore(&hits, 0u);
      workgroupBarrier();
      if (i < n && exp(li - lmax) >= P.min_p) { atomicAdd(&hits, 1u); }
      workgroupBarrier();
      n = max(atomicLoad(&hits), 1u);
    }
    workgroupBarrier();
    sv[i] = select(0.0, exp((li - lmax) / P.temperature), i < n);
    workgroupBarrier();
    scan(i);
    let goal = uniform01(P.seed, P.counter) * sv[n - 1u];
    let drawn = first_index(i, n, goal, true, n);
    let last = first_index(i, n, sv[n - 1u], false, n - 1u);   // when u * sum rounded up to the sum
    tok = cand_in[select(drawn, last, drawn == n)].y;
  }
  record(i, {{K}}u, tok);
}
