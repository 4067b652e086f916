// What sample.wgsl and sample/greedy.wgsl share: the bindings of the step's ids, the history ring, the
// logit bias and the drawn token; runtime/sampling.py's candidate order and penalty rule; the ring update.
// Defines: V (vocab), CAP (ring size), NB (bias entries; ids < 0 are unused).
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
