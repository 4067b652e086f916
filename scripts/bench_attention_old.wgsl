// The decode kernel attention_decode.wgsl replaced (two dispatches: `main` per split, `combine`), kept
// for scripts/bench_attention.py's before/after numbers. Not used by the engine.
// Fused attention (QK^T, masked online softmax, V) over the KV cache; one kernel for decode and prefill.
//
// The query rows of one KV head are the (t, g) pairs of the chunk flattened as rg = t * G + g (GQA: query
// head h = kvh * G + g reads KV head kvh), so K/V tiles are read once for every query head that shares
// them. A workgroup takes R consecutive rows of one KV head and one of NSPLIT equal slices of the keys
// those rows can see, walking it in tiles of TK keys (one thread per key for the scores, one thread per
// output vec4 for the V product). NSPLIT > 1 is flash-decoding: each slice writes its partial max, sum
// and accumulator and `combine` merges them; NSPLIT == 1 (DIRECT) writes the output directly.
// Rows of padded tokens (t >= n_tokens) see no keys and write zeros; keys outside a row's causal/window
// range get no weight, and no thread reads cache rows at or beyond pos + n_tokens.
// Only workgroup memory and barriers: no subgroup feature needed.
//
// Defines: D, DV (head dims, multiples of 4), G, NH, NKV, T, R, NRB (row blocks per KV head), TK
// (= workgroup size), NSPLIT, DIRECT (bool), SCALE, SOFTCAP (0: none), WINDOW (0: none), NACC
// (ceil(R * DV / 4 / TK)).
#include "common/params.wgsl"
#include "math.wgsl"

@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(2) var<storage, read> cache_k: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> cache_v: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> dst: array<vec4<f32>>;  // DIRECT: out, else partials
@group(0) @binding(5) var<storage, read_write> out: array<vec4<f32>>;  // combine's output

const D4: u32 = {{D}}u / 4u;
const DV4: u32 = {{DV}}u / 4u;
const R: u32 = {{R}}u;
const TK: u32 = {{TK}}u;
const PART: u32 = DV4 + 1u;    // vec4s per partial row: (m, l, 0, 0) then the DV accumulator

var<workgroup> qs: array<vec4<f32>, R * D4>;
var<workgroup> ss: array<f32, R * TK>;        // scores, then probabilities, of the current tile
var<workgroup> m_s: array<f32, R>;
var<workgroup> l_s: array<f32, R>;
var<workgroup> alpha_s: array<f32, R>;

struct Row { t: u32, h: u32, live: bool }

// Query row rg (= t * G + g) of KV head kvh.
fn row_of(rg: u32, kvh: u32) -> Row {
  let t = rg / {{G}}u;
  return Row(t, kvh * {{G}}u + rg % {{G}}u, rg < {{T}}u * {{G}}u && t < P.n_tokens);
}

fn key_visible(j: u32, p: u32) -> bool {
  return j <= p && ({{WINDOW}}u == 0u || j + {{WINDOW}}u > p);
}

// Keys any live row of the n rows from rg0 can see: [lo, hi). Empty when every row is padding.
fn key_range(rg0: u32, n: u32) -> vec2<u32> {
  let t_first = rg0 / {{G}}u;
  if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
  let t_last = min((rg0 + n - 1u) / {{G}}u, min({{T}}u, P.n_tokens) - 1u);
  var lo = 0u;
  if ({{WINDOW}}u > 0u && P.pos + t_first + 1u > {{WINDOW}}u) { lo = P.pos + t_first + 1u - {{WINDOW}}u; }
  return vec2<u32>(lo, P.pos + t_last + 1u);
}

@compute @workgroup_size({{TK}})
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let linear = wid.y * nwg.x + wid.x;
  let split = linear % {{NSPLIT}}u;
  let rb = (linear / {{NSPLIT}}u) % {{NRB}}u;
  let kvh = linear / ({{NSPLIT}}u * {{NRB}}u);
  if (kvh >= {{NKV}}u) { return; }

  let range = key_range(rb * R, R);
  let lo = range.x;
  let hi = range.y;
  let chunk = (hi - lo + {{NSPLIT}}u - 1u) / {{NSPLIT}}u;
  let ks = min(lo + split * chunk, hi);
  let ke = min(ks + chunk, hi);

  for (var i = lid; i < R * D4; i += TK) {
    let rw = row_of(rb * R + i / D4, kvh);
    qs[i] = select(vec4<f32>(0.0), q[(rw.t * {{NH}}u + rw.h) * D4 + i % D4], rw.live);
  }
  for (var r = lid; r < R; r += TK) { m_s[r] = NEG_BIG; l_s[r] = 0.0; }
  var acc: array<vec4<f32>, {{NACC}}>;
  for (var a = 0u; a < {{NACC}}u; a++) { acc[a] = vec4<f32>(0.0); }
  workgroupBarrier();

  for (var k0 = ks; k0 < ke; k0 += TK) {
    // 1. scores of key j = k0 + lid against every row of the block
    let j = k0 + lid;
    var dots: array<f32, R>;
    for (var r = 0u; r < R; r++) { dots[r] = 0.0; }
    if (j < ke) {
      let kb = (j * {{NKV}}u + kvh) * D4;
      for (var d = 0u; d < D4; d++) {
        let kv = cache_k[kb + d];
        for (var r = 0u; r < R; r++) { dots[r] += dot(qs[r * D4 + d], kv); }
      }
    }
    for (var r = 0u; r < R; r++) {
      let rw = row_of(rb * R + r, kvh);
      var s = dots[r] * {{SCALE}};
      if ({{SOFTCAP}} > 0.0) { s = {{SOFTCAP}} * safe_tanh(s / {{SOFTCAP}}); }
      ss[r * TK + lid] = select(NEG_BIG, s, j < ke && rw.live && key_visible(j, P.pos + rw.t));
    }
    workgroupBarrier();
    // 2. online softmax bookkeeping, one thread per row
    let nk = min(TK, ke - k0);
    for (var r = lid; r < R; r += TK) {
      var mt = NEG_BIG;
      for (var i = 0u; i < nk; i++) { mt = max(mt, ss[r * TK + i]); }
      let m_new = max(m_s[r], mt);
      var sum = 0.0;
      for (var i = 0u; i < nk; i++) {
        let p = select(exp(ss[r * TK + i] - m_new), 0.0, ss[r * TK + i] == NEG_BIG);
        ss[r * TK + i] = p;
        sum += p;
      }
      let alpha = select(exp(m_s[r] - m_new), 1.0, m_new == NEG_BIG);
      alpha_s[r] = alpha;
      l_s[r] = l_s[r] * alpha + sum;
      m_s[r] = m_new;
    }
    workgroupBarrier();
    // 3. acc = acc * alpha + P V, one thread per (row, vec4 of DV)
    for (var a = 0u; a < {{NACC}}u; a++) {
      let e = a * TK + lid;
      if (e < R * DV4) {
        let r = e / DV4;
        let vb = kvh * DV4 + e % DV4;
        var o = acc[a] * alpha_s[r];
        let sb = r * TK;
        var i = 0u;
        for (; i + 4u <= nk; i += 4u) {   // four independent loads in flight per step
          let vi = (k0 + i) * {{NKV}}u * DV4 + vb;
          let v0 = cache_v[vi];
          let v1 = cache_v[vi + {{NKV}}u * DV4];
          let v2 = cache_v[vi + 2u * {{NKV}}u * DV4];
          let v3 = cache_v[vi + 3u * {{NKV}}u * DV4];
          o += ss[sb + i] * v0 + ss[sb + i + 1u] * v1 + ss[sb + i + 2u] * v2 + ss[sb + i + 3u] * v3;
        }
        for (; i < nk; i++) { o += ss[sb + i] * cache_v[(k0 + i) * {{NKV}}u * DV4 + vb]; }
        acc[a] = o;
      }
    }
    workgroupBarrier();
  }

  for (var a = 0u; a < {{NACC}}u; a++) {
    let e = a * TK + lid;
    let rw = row_of(rb * R + e / DV4, kvh);
    if (e < R * DV4 && rb * R + e / DV4 < {{T}}u * {{G}}u) {
      let row = rw.t * {{NH}}u + rw.h;
      let l = l_s[e / DV4];
      if ({{DIRECT}}) {
        dst[row * DV4 + e % DV4] = select(vec4<f32>(0.0), acc[a] / l, l > 0.0);
      } else {
        let pb = (split * {{T}}u * {{NH}}u + row) * PART;
        dst[pb + 1u + e % DV4] = acc[a];
        if (e % DV4 == 0u) { dst[pb] = vec4<f32>(m_s[e / DV4], l, 0.0, 0.0); }
      }
    }
  }
}

// Merge the NSPLIT partials of every (t, h) row: one workgroup per row; the split weights
// exp(m_s - m) are computed once, in parallel, then one thread per output vec4 sums the accumulators.
var<workgroup> wsplit: array<f32, {{NSPLIT}}>;
var<workgroup> ml_l: array<f32, {{NSPLIT}}>;
var<workgroup> lsum: f32;

@compute @workgroup_size({{TK}})
fn combine(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let row = wid.y * nwg.x + wid.x;
  if (row >= {{T}}u * {{NH}}u) { return; }
  for (var s = lid; s < {{NSPLIT}}u; s += TK) { wsplit[s] = dst[(s * {{T}}u * {{NH}}u + row) * PART].x; }
  workgroupBarrier();
  var m = NEG_BIG;
  for (var s = 0u; s < {{NSPLIT}}u; s++) { m = max(m, wsplit[s]); }
  workgroupBarrier();
  for (var s = lid; s < {{NSPLIT}}u; s += TK) {
    let ml = dst[(s * {{T}}u * {{NH}}u + row) * PART];
    wsplit[s] = select(exp(ml.x - m), 0.0, ml.x == NEG_BIG);
    ml_l[s] = ml.y;
  }
  workgroupBarrier();
  if (lid == 0u) {
    var l = 0.0;
    for (var s = 0u; s < {{NSPLIT}}u; s++) { l += ml_l[s] * wsplit[s]; }
    lsum = l;
  }
  workgroupBarrier();
  let l = lsum;
  for (var c = lid; c < DV4; c += TK) {
    var o = vec4<f32>(0.0);
    for (var s = 0u; s < {{NSPLIT}}u; s++) {
      o += dst[(s * {{T}}u * {{NH}}u + row) * PART + 1u + c] * wsplit[s];
    }
    out[row * DV4 + c] = select(vec4<f32>(0.0), o / l, l > 0.0);
  }
}

