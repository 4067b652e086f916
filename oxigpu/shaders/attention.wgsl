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

// ---- Prefill (T > 1): flash attention with K/V tiles in workgroup memory.
// A 128-thread workgroup takes BQ consecutive query rows of one KV head (rows as in `main`) and walks
// the keys they can see in tiles of BK: the K tile is loaded coalesced, every (row, key) score of the
// tile computed from workgroup memory (thread: one key, RPT rows), the softmax statistics reduced over
// the FPR threads of each row, then the V tile replaces the K tile and each thread adds P V to its
// NACC (row, vec4) accumulators. Rows of padded tokens write zeros; cache rows at or past
// pos + n_tokens are never read (loads past the block's range are zero-filled).
// Defines (besides main's D, DV, G, NH, NKV, T, SCALE, SOFTCAP, WINDOW): BQ, BK, PRB (row blocks per KV
// head), KS (vec4 stride of a K/V tile row: max(D4, DV4) + 1, odd, so lanes reading consecutive keys
// hit distinct banks), PACC (ceil(BQ * DV4 / 128)).
const BQ: u32 = {{BQ}}u;
const BK: u32 = {{BK}}u;
const NG: u32 = 128u / BK;         // score threads per key: rows rq, rq + NG, ...
const RPT: u32 = BQ / NG;          // rows per score thread
const FPR: u32 = 128u / BQ;        // softmax threads per row
const KPT: u32 = BK / FPR;         // keys per softmax thread
const KS: u32 = {{KS}}u;

var<workgroup> fq: array<vec4<f32>, BQ * D4>;
var<workgroup> fkv: array<vec4<f32>, BK * KS>;   // the K tile, then the V tile
var<workgroup> fs: array<f32, BQ * BK>;          // scores, then probabilities
var<workgroup> fmax: array<f32, 128>;            // per-thread partial max / sum of its KPT keys
var<workgroup> fsum: array<f32, 128>;
var<workgroup> fm: array<f32, BQ>;               // running max and sum per row
var<workgroup> fl: array<f32, BQ>;

// Zero-filled past `end` (keys past the block's range; their cache rows may be unwritten).
fn load_tile(k0: u32, end: u32, kvh: u32, d4: u32, lid: u32, is_v: bool) {
  for (var i = lid; i < BK * d4; i += 128u) {
    let j = k0 + i / d4;
    var v = vec4<f32>(0.0);
    let g = (j * {{NKV}}u + kvh) * d4 + i % d4;
    if (j < end && is_v) { v = cache_v[g]; }
    if (j < end && !is_v) { v = cache_k[g]; }
    fkv[(i / d4) * KS + i % d4] = v;
  }
}

// Row r's running max after this tile (its old max and the FPR partial maxima).
fn tile_max(r: u32) -> f32 {
  var m = fm[r];
  for (var f = 0u; f < FPR; f++) { m = max(m, fmax[r * FPR + f]); }
  return m;
}

@compute @workgroup_size(128)
fn prefill(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
           @builtin(local_invocation_index) lid: u32) {
  let rb = (wid.y * nwg.x + wid.x) % {{PRB}}u;
  let kvh = (wid.y * nwg.x + wid.x) / {{PRB}}u;
  if (kvh >= {{NKV}}u) { return; }
  let range = key_range(rb * BQ, BQ);
  let lo = range.x;
  let hi = range.y;
  for (var i = lid; i < BQ * D4; i += 128u) {
    let rw = row_of(rb * BQ + i / D4, kvh);
    fq[i] = select(vec4<f32>(0.0), q[(rw.t * {{NH}}u + rw.h) * D4 + i % D4], rw.live);
  }
  if (lid < BQ) { fm[lid] = NEG_BIG; fl[lid] = 0.0; }
  var acc: array<vec4<f32>, {{PACC}}>;
  for (var a = 0u; a < {{PACC}}u; a++) { acc[a] = vec4<f32>(0.0); }
  let kq = lid % BK;          // score thread: key kq, rows rq + NG i
  let rq = lid / BK;
  let sr = lid / FPR;         // softmax thread: row sr, keys sf * KPT ..
  let sf = lid % FPR;

  for (var k0 = lo; k0 < hi; k0 += BK) {
    load_tile(k0, hi, kvh, D4, lid, false);
    workgroupBarrier();
    // 1. scores
    var dots: array<f32, RPT>;
    for (var i = 0u; i < RPT; i++) { dots[i] = 0.0; }
    for (var d = 0u; d < D4; d++) {
      let kv = fkv[kq * KS + d];
      for (var i = 0u; i < RPT; i++) { dots[i] += dot(fq[(rq + NG * i) * D4 + d], kv); }
    }
    for (var i = 0u; i < RPT; i++) {
      let r = rq + NG * i;
      let rw = row_of(rb * BQ + r, kvh);
      var s = dots[i] * {{SCALE}};
      if ({{SOFTCAP}} > 0.0) { s = {{SOFTCAP}} * safe_tanh(s / {{SOFTCAP}}); }
      fs[r * BK + kq] = select(NEG_BIG, s, k0 + kq < hi && rw.live && key_visible(k0 + kq, P.pos + rw.t));
    }
    workgroupBarrier();
    // 2. partial maxima; the V tile replaces the K tile
    var mx = NEG_BIG;
    for (var i = 0u; i < KPT; i++) { mx = max(mx, fs[sr * BK + sf * KPT + i]); }
    fmax[lid] = mx;
    load_tile(k0, hi, kvh, DV4, lid, true);
    workgroupBarrier();
    // 3. probabilities and partial sums
    let m_new = tile_max(sr);
    var sum = 0.0;
    for (var i = 0u; i < KPT; i++) {
      let s = fs[sr * BK + sf * KPT + i];
      let p = select(exp(s - m_new), 0.0, s == NEG_BIG);
      fs[sr * BK + sf * KPT + i] = p;
      sum += p;
    }
    fsum[lid] = sum;
    workgroupBarrier();
    // 4. acc = acc * alpha + P V (thread: pairs e = a * 128 + lid; keys outermost, so where DV4
    // divides 128 every pair shares the column and one V load feeds them all)
    for (var a = 0u; a < {{PACC}}u; a++) {
      let r = min((a * 128u + lid) / DV4, BQ - 1u);
      let mr = tile_max(r);
      acc[a] *= select(exp(fm[r] - mr), 1.0, mr == NEG_BIG);
    }
    for (var i = 0u; i < BK; i++) {
      for (var a = 0u; a < {{PACC}}u; a++) {
        let e = a * 128u + lid;
        let r = min(e / DV4, BQ - 1u);      // pairs past the tile compute row BQ - 1 again, never stored
        acc[a] += fs[r * BK + i] * fkv[i * KS + e % DV4];
      }
    }
    workgroupBarrier();
    // 5. running statistics (read again only after the next tile's first barrier)
    if (lid < BQ) {
      let mr = tile_max(lid);
      var l = 0.0;
      for (var f = 0u; f < FPR; f++) { l += fsum[lid * FPR + f]; }
      fl[lid] = fl[lid] * select(exp(fm[lid] - mr), 1.0, mr == NEG_BIG) + l;
      fm[lid] = mr;
    }
  }
  workgroupBarrier();
  for (var a = 0u; a < {{PACC}}u; a++) {
    let e = a * 128u + lid;
    if (e < BQ * DV4 && rb * BQ + e / DV4 < {{T}}u * {{G}}u) {
      let rw = row_of(rb * BQ + e / DV4, kvh);
      let l = fl[e / DV4];
      dst[(rw.t * {{NH}}u + rw.h) * DV4 + e % DV4] = select(vec4<f32>(0.0), acc[a] / l, l > 0.0);
    }
  }
}
