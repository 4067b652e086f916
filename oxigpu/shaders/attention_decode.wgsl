// Decode attention (and the fallback for any T): split-KV flash attention over the cache in ONE
// dispatch, the splits merged by the workgroup that finishes last.
//
// Rows: the query rows of one KV head are the (t, g) pairs (query head h = kvh * G + g); a workgroup
// takes a block of R rows (heads sharing a KV head, so they share its K/V loads; R stays small enough for
// several key slices, and a larger group takes several row blocks, whose repeated K/V reads mostly hit
// L2) and one split of the keys they can see. PAGED (rows of several sequences, each at its own position,
// keys read through its block table: common/paged_true.wgsl): a block holds rows of one token, NRB per
// token, NRBT = T NRB per KV head. Otherwise (one sequence at P.pos + t in a contiguous cache) the rows
// are flattened as rg = t * G + g and a block takes R consecutive ones (NRBT = NRB).
// Splits: the grid holds MAXS splits per row block, but only `nact` are active, computed from P at run
// time: keys per split = max(CHUNK, ceil(n_keys / MAXS)) rounded up to BLK (one pass of the workgroup),
// so short contexts use few workgroups per row block and idle workgroups return at once. With T == 1
// the workgroups take the active splits only, block after block, so a grid of NKV * NRB * nact suffices
// (the GPU-resident decode launches that many per step: the idle workgroups of a grid sized for the
// whole context cost a few % of a short context's decode step). Where a batch's row blocks alone fill the
// GPU (T > 1), a workgroup takes SPW consecutive splits of its block one after another, each summed as a
// workgroup of its own would (so the result is the same for any SPW), its loads running on across the
// splits' boundaries: short splits cost mostly their workgroups' starts and drains there.
// Inside a workgroup: R * KS teams of L lanes, team = slice * R + row: each walks its row's share of the
// split (KB keys per pass, slices interleaved, so a workgroup pass covers BLK = KS * KB keys). A lane
// holds vec4 columns c0 = lane and c1 = lane + L (NCK, NCV: 1 or 2 of them) of q, of the K and V rows it
// loads (coalesced across the team) and of the output accumulator. Scores come four keys to a vec4, as
// team sums (attention/team_{sg,wg}.wgsl); the online softmax runs in registers (every lane of a team
// holds the same statistics). There are no private arrays: drivers may put loop-indexed ones in local
// memory. The KS slices of a row merge through workgroup memory at the end.
// Merge across workgroups: with one active split the workgroup writes the output. Otherwise each writes
// its partials (max m, sum l, accumulator) to `part`, then storageBarrier() (device-scope release) and one
// atomicAdd of its split count on the row block's counter; the workgroup that brings it to nact is last:
// storageBarrier() (acquire), it merges every partial into the output (online, eight splits per step) and
// resets the counter to 0 for the next run (the counters start zeroed; replays in one pass and across
// submits are tested in tests/test_kernel_attention.py). A workgroup that holds all nact splits merges
// them without the counter.
// Masking: keys outside a row's causal/window range get no weight; loads are clamped into the split's
// range, so no cache row at or past pos + n_tokens is read. Padded rows (t >= n_tokens) write zeros.
// The caches hold packed halves (common/half.wgsl: a vec4 column of a row is a vec2<u32>); passes keep
// them packed in registers and widen them where the scores and the accumulators use them. Quantized
// caches (KVQ) are dequantized as they are loaded (kv/cols_true.wgsl; the `cache` key source only).
// Key sources (attention/kv_cache.wgsl or kv_rope.wgsl, by KV): `cache` (the attention op): q as given,
// every key from the cache. `rope` (rope_kv_attention, T == 1: rope and the KV-cache write fused in, one
// dispatch fewer per decode layer): q rotated as it is loaded; the step's own key and value, rotated and
// packed in registers (split_start), take the place of its cache row in the pass that holds it (OWN_KEY:
// that row is being written by this dispatch), so the key is summed where the cache path sums it and a
// row's output is the same bits either way (a speculative verification's rows read the cache); one
// workgroup per KV head writes the new K and V rows.
//
// Defines: D, DV (head dims, multiples of 4), G, NH, NKV, T, R, NRB (row blocks per KV head, or per token
// where PAGED), NRBT, PAGED (and common/paged_true.wgsl's: bindings 11-13), L, KS, KB
// (4 or 8), NCK (= ceil(D / 4 / L), 1 or 2), NCV (likewise for DV), MAXS, CHUNK (a multiple of KS * KB), SPW,
// TML, TACC (workgroup arrays of the slice merge; 1 when KS == 1), REDUCE (sg | wg), SCALE, SOFTCAP
// (0: none), WINDOW (0: none), KV (cache | rope; rope adds common/rope.wgsl's defines), KVQ (and
// kv/cols_true.wgsl's defines).
#include "common/params.wgsl"
#include "common/half.wgsl"
#include "math.wgsl"
#include "common/paged_{{PAGED}}.wgsl"
#include "kv/cols_{{KVQ}}.wgsl"
#include "attention/decode_io.wgsl"

const D4: u32 = {{D}}u / 4u;
const DV4: u32 = {{DV}}u / 4u;
const G: u32 = {{G}}u;
const NH: u32 = {{NH}}u;
const NKV: u32 = {{NKV}}u;
const R: u32 = {{R}}u;
const NRB: u32 = {{NRB}}u;
const NRBT: u32 = {{NRBT}}u;
const PAGED: bool = {{PAGED}};
const L: u32 = {{L}}u;
const KS: u32 = {{KS}}u;
const WG: u32 = L * R * KS;
const KB: u32 = {{KB}}u;
const BLK: u32 = KS * KB;
const NCK: u32 = {{NCK}}u;
const NCV: u32 = {{NCV}}u;
const MAXS: u32 = {{MAXS}}u;
const CHUNK: u32 = {{CHUNK}}u;
const SPW: u32 = {{SPW}}u;        // splits per workgroup (1 where T == 1)
const WINDOW: u32 = {{WINDOW}}u;
const SOFTCAP: f32 = {{SOFTCAP}};
const PART: u32 = DV4 + 1u;      // vec4s per partial row: (m, l, 0, 0), then the DV accumulator

#include "attention/team_{{REDUCE}}.wgsl"
#include "attention/kv_{{KV}}.wgsl"

var<workgroup> tml: array<vec2<f32>, {{TML}}>;     // slice merge: (m, l) per team
var<workgroup> tacc: array<vec4<f32>, {{TACC}}>;   // slice merge: accumulator per team
var<workgroup> last_w: u32;

// Row r of row block rb of KV head kvh.
fn block_row(rb: u32, r: u32, kvh: u32) -> Row {
  if (PAGED) {
    let t = rb / NRB;
    let g = rb % NRB * R + r;
    let valid = g < G;
    return Row(t, kvh * G + min(g, G - 1u), valid && t < P.n_tokens, valid, pos_of(t), seq_of(t));
  }
  let rg = rb * R + r;
  let t = rg / G;
  let valid = rg < {{T}}u * G;
  return Row(t, kvh * G + rg % G, valid && t < P.n_tokens, valid, P.pos + t, 0u);
}

// Keys any live row of row block rb can see: [lo, hi). Empty when every row is padding.
fn key_range(rb: u32) -> vec2<u32> {
  var t_first = rb * R / G;
  var p_last = 0u;
  if (PAGED) {
    t_first = rb / NRB;
    if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
    p_last = pos_of(t_first);
  } else {
    if (t_first >= P.n_tokens) { return vec2<u32>(0u); }
    p_last = P.pos + min((rb * R + R - 1u) / G, min({{T}}u, P.n_tokens) - 1u);
  }
  let p_first = select(P.pos + t_first, p_last, PAGED);
  var lo = 0u;
  if (WINDOW > 0u && p_first + 1u > WINDOW) { lo = p_first + 1u - WINDOW; }
  return vec2<u32>(lo, p_last + 1u);
}

// (keys per split, active splits) of a row block seeing the keys in range (DecodeConfig.splits).
fn splits_of(range: vec2<u32>) -> vec2<u32> {
  let n_keys = range.y - range.x;
  let kps = max(CHUNK, (n_keys + MAXS * BLK - 1u) / (MAXS * BLK) * BLK);
  return vec2<u32>(kps, max(1u, (n_keys + kps - 1u) / kps));
}

// Which of keys j a row at position p sees (j < ke: inside the split).
fn visible4(j: vec4<u32>, ke: u32, p: u32, live: bool) -> vec4<bool> {
  var v = (j < vec4<u32>(ke)) & (j <= vec4<u32>(p)) & vec4<bool>(live);
  if (WINDOW > 0u) { v = v & (j + vec4<u32>(WINDOW) > vec4<u32>(p)); }
  return v;
}

// Four vec4 rows (column c of four keys' K or V rows, or four partial accumulators).
struct Rows4 { r0: vec4<f32>, r1: vec4<f32>, r2: vec4<f32>, r3: vec4<f32> }

// Column c of four K (V) rows (keys j) of KV head kvh as loaded from the cache (kv/cols_*.wgsl).
struct K4 { r0: KRaw, r1: KRaw, r2: KRaw, r3: KRaw }
struct V4 { r0: VRaw, r1: VRaw, r2: VRaw, r3: VRaw }

// (j: physical cache rows)
fn k4(j: vec4<u32>, kvh: u32, c: u32) -> K4 {
  return K4(k_raw(j.x, kvh, c), k_raw(j.y, kvh, c), k_raw(j.z, kvh, c), k_raw(j.w, kvh, c));
}

fn v4(j: vec4<u32>, kvh: u32, c: u32) -> V4 {
  return V4(v_raw(j.x, kvh, c), v_raw(j.y, kvh, c), v_raw(j.z, kvh, c), v_raw(j.w, kvh, c));
}

fn widen_k4(h: K4) -> Rows4 { return Rows4(widen_k(h.r0), widen_k(h.r1), widen_k(h.r2), widen_k(h.r3)); }
fn widen_v4(h: V4) -> Rows4 { return Rows4(widen_v(h.r0), widen_v(h.r1), widen_v(h.r2), widen_v(h.r3)); }

fn dot4(x: vec4<f32>, k: Rows4) -> vec4<f32> {
  return vec4<f32>(dot(x, k.r0), dot(x, k.r1), dot(x, k.r2), dot(x, k.r3));
}

// a + sum_i p[i] * v.ri (a shallow tree: short dependency chains)
fn pv(a: vec4<f32>, p: vec4<f32>, v: Rows4) -> vec4<f32> {
  return a + ((p.x * v.r0 + p.y * v.r1) + (p.z * v.r2 + p.w * v.r3));
}

// The K and V columns of one team pass: keys j0..j0+3 (a) and, with KB == 8, j0+4..j0+7 (b); columns
// c0 (k0, v0) and c1 (k1, v1, where NCK / NCV > 1).
struct Pass { ka0: K4, ka1: K4, kb0: K4, kb1: K4, va0: V4, va1: V4, vb0: V4, vb1: V4 }

// Pass p with its keys i0 .. KB - 1 replaced by the step's own key and value: the key at i0, and past it
// the rows that loads clamped to it (masked: they weigh 0, but the row they read may not be written yet).
fn with_own(p: Pass, i0: u32) -> Pass {
  var o = p;
  if (i0 == 0u) { o.ka0.r0 = own.k0; o.ka1.r0 = own.k1; o.va0.r0 = own.v0; o.va1.r0 = own.v1; }
  if (i0 <= 1u) { o.ka0.r1 = own.k0; o.ka1.r1 = own.k1; o.va0.r1 = own.v0; o.va1.r1 = own.v1; }
  if (i0 <= 2u) { o.ka0.r2 = own.k0; o.ka1.r2 = own.k1; o.va0.r2 = own.v0; o.va1.r2 = own.v1; }
  if (i0 <= 3u) { o.ka0.r3 = own.k0; o.ka1.r3 = own.k1; o.va0.r3 = own.v0; o.va1.r3 = own.v1; }
  if (KB > 4u) {
    if (i0 <= 4u) { o.kb0.r0 = own.k0; o.kb1.r0 = own.k1; o.vb0.r0 = own.v0; o.vb1.r0 = own.v1; }
    if (i0 <= 5u) { o.kb0.r1 = own.k0; o.kb1.r1 = own.k1; o.vb0.r1 = own.v0; o.vb1.r1 = own.v1; }
    if (i0 <= 6u) { o.kb0.r2 = own.k0; o.kb1.r2 = own.k1; o.vb0.r2 = own.v0; o.vb1.r2 = own.v1; }
    o.kb0.r3 = own.k0; o.kb1.r3 = own.k1; o.vb0.r3 = own.v0; o.vb1.r3 = own.v1;
  }
  return o;
}

// Loads of the pass starting at key j0 of slot s, clamped to key `last` (always a written cache row).
fn load_pass(s: u32, j0: u32, last: u32, kvh: u32, kc0: u32, kc1: u32, vc0: u32, vc1: u32) -> Pass {
  var p: Pass;
  let pj = phys8(s, min(vec4<u32>(j0) + vec4<u32>(0u, 1u, 2u, 3u), vec4<u32>(last)),
                 min(vec4<u32>(j0) + vec4<u32>(4u, 5u, 6u, 7u), vec4<u32>(last)));
  let ja = pj[0];
  let jb = pj[1];
  p.ka0 = k4(ja, kvh, kc0);
  p.va0 = v4(ja, kvh, vc0);
  if (NCK > 1u) { p.ka1 = k4(ja, kvh, kc1); }
  if (NCV > 1u) { p.va1 = v4(ja, kvh, vc1); }
  if (KB > 4u) {
    p.kb0 = k4(jb, kvh, kc0);
    p.vb0 = v4(jb, kvh, vc0);
    if (NCK > 1u) { p.kb1 = k4(jb, kvh, kc1); }
    if (NCV > 1u) { p.vb1 = v4(jb, kvh, vc1); }
  }
  return p;
}

fn softcap4(s: vec4<f32>) -> vec4<f32> {
  if (SOFTCAP > 0.0) { return SOFTCAP * tanh(clamp(s / SOFTCAP, vec4<f32>(-15.0), vec4<f32>(15.0))); }
  return s;
}

fn max4(v: vec4<f32>) -> f32 { return max(max(v.x, v.y), max(v.z, v.w)); }

// Online-softmax state of one row in one lane: running max, sum, and the accumulator columns c0, c1.
struct St { m: f32, l: f32, a0: vec4<f32>, a1: vec4<f32> }

// st merged with four (m, l, accumulator) entries (m = NEG_BIG: empty).
fn merge4(st: St, m4: vec4<f32>, l4: vec4<f32>, a: Rows4, b: Rows4) -> St {
  let mx = max(st.m, max4(m4));
  let w = select(exp(m4 - vec4<f32>(mx)), vec4<f32>(0.0), m4 == vec4<f32>(NEG_BIG));
  let sc = select(exp(st.m - mx), 1.0, mx == NEG_BIG);
  var o = St(mx, st.l * sc + dot(w, l4), pv(st.a0 * sc, w, a), vec4<f32>(0.0));
  if (NCV > 1u) { o.a1 = pv(st.a1 * sc, w, b); }
  return o;
}

// The KS slices' states of each row merged through workgroup memory: valid in slice 0's teams
// (team < R). Call in uniform control flow.
fn merge_slices(team: u32, tl: u32, st: St) -> St {
  if (KS == 1u) { return st; }
  if (tl == 0u) { tml[team] = vec2<f32>(st.m, st.l); }
  if (tl < DV4) { tacc[team * DV4 + tl] = st.a0; }
  if (NCV > 1u && tl + L < DV4) { tacc[team * DV4 + tl + L] = st.a1; }
  workgroupBarrier();
  var o = st;
  if (team < R) {
    o = St(NEG_BIG, 0.0, vec4<f32>(0.0), vec4<f32>(0.0));
    for (var i = 0u; i < KS; i++) { o.m = max(o.m, tml[i * R + team].x); }
    for (var i = 0u; i < KS; i++) {
      let t = i * R + team;
      let e = tml[t];
      let w = select(exp(e.x - o.m), 0.0, e.x == NEG_BIG);
      o.l += w * e.y;
      o.a0 += w * tacc[t * DV4 + min(tl, DV4 - 1u)];
      if (NCV > 1u) { o.a1 += w * tacc[t * DV4 + min(tl + L, DV4 - 1u)]; }
    }
  }
  workgroupBarrier();
  return o;
}

// Index of the (m, l) vec4 of split s, row r of row block blk in `part` (the accumulator follows it).
fn part_at(blk: u32, s: u32, r: u32) -> u32 { return ((blk * MAXS + s) * R + r) * PART; }

fn write_out(rw: Row, tl: u32, st: St) {
  let ob = (rw.t * NH + rw.h) * DV4;
  if (tl < DV4) { out[ob + tl] = select(vec4<f32>(0.0), st.a0 / st.l, st.l > 0.0); }
  if (NCV > 1u && tl + L < DV4) { out[ob + tl + L] = select(vec4<f32>(0.0), st.a1 / st.l, st.l > 0.0); }
}

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let linear = wid.y * nwg.x + wid.x;
  // T == 1: every row block sees the same keys, so a block's nact active splits are consecutive
  // workgroups and the host may launch only NKV * NRB * nact (Attention.decode_groups); else MAXS / SPW
  // per block
  let per = select((MAXS + SPW - 1u) / SPW, splits_of(key_range(0u)).y, {{T}}u == 1u);
  let blk = linear / per;               // kvh * NRBT + rb
  if (blk >= NKV * NRBT) { return; }
  let rb = blk % NRBT;
  let kvh = blk / NRBT;
  let range = key_range(rb);
  let sp = splits_of(range);
  let kps = sp.x;
  let nact = sp.y;
  let s0 = linear % per * SPW;          // this workgroup's splits: s0 .. s1 - 1
  if (s0 >= nact) { return; }
  let s1 = min(s0 + SPW, nact);

  let sgs = team_setup(lane);
  let lid = lane.lid;
  let team = lid / L;
  let tl = lid % L;
  let r = team % R;
  let slice = team / R;
  let rw = block_row(rb, r, kvh);
  let tpos = rw.p;
  let kc0 = min(tl, D4 - 1u);          // clamped columns: lanes past the head load a real column
  let kc1 = min(tl + L, D4 - 1u);      // (q is zero there; their accumulators are never stored)
  let vc0 = min(tl, DV4 - 1u);
  let vc1 = min(tl + L, DV4 - 1u);
  var q0 = vec4<f32>(0.0);
  var q1 = vec4<f32>(0.0);
  let qb = (rw.t * NH + rw.h) * D4;
  if (rw.live && tl < D4) { q0 = q_col(tpos, qb, tl) * {{SCALE}}; }
  if (NCK > 1u && rw.live && tl + L < D4) { q1 = q_col(tpos, qb, tl + L) * {{SCALE}}; }
  let qi = q_inv(lane, sgs, rw.live, qb, tl);   // per-head q norm (rope_kv_attention's hooks), else 1
  q0 *= qi;
  q1 *= qi;

  // the block's token (a PAGED block has one; rope_kv_attention, T rows of T sequences, too)
  let bt = block_row(rb, 0u, kvh);
  let writer = team < R && rw.valid;
  let step = vec4<u32>(0u, 1u, 2u, 3u);
  // Each split's sums are those of a workgroup of its own (the same passes in the same order, the state
  // started afresh): SPW only saves the start of a workgroup and keeps the loads in flight across the
  // splits' boundaries, so a row's result does not depend on it.
  var ks = range.x + s0 * kps;
  var ke = min(ks + kps, range.y);
  var kend = ke;
  // software pipelined: the next pass's loads are in flight while this one computes (after a split's
  // last pass, the next split's first; after the workgroup's last, a clamped re-read of its last key)
  var cur: Pass;
  if (kend > ks) { cur = load_pass(bt.s, ks + slice * KB, kend - 1u, kvh, kc0, kc1, vc0, vc1); }
  for (var split = s0; split < s1; split++) {
    split_start(lane, sgs, rw, team, tl, kvh, bt, rb % NRB == 0u, ke);
    var st = St(NEG_BIG, 0.0, vec4<f32>(0.0), vec4<f32>(0.0));
    let nblk = (kend - ks + BLK - 1u) / BLK;  // workgroup-uniform: the team sums may hold barriers
    let nks = ke;                             // the next split's keys
    let nke = min(nks + kps, range.y);
    let nkend = nke;
    let more = SPW > 1u && split + 1u < s1;   // a constant false where SPW == 1: the one-split loop as before
    for (var b = 0u; b < nblk; b++) {
      let k0 = ks + (b * KS + slice) * KB;
      if (OWN_KEY && bt.p < k0 + KB) { cur = with_own(cur, select(0u, bt.p - k0, bt.p > k0)); }
      var nj = k0 + BLK;
      var nlast = kend - 1u;
      if (more && b + 1u == nblk) {
        nj = nks + slice * KB;
        nlast = nkend - 1u;
      }
      let nxt = load_pass(bt.s, nj, nlast, kvh, kc0, kc1, vc0, vc1);
      let ja = vec4<u32>(k0) + step;
      let jb = ja + vec4<u32>(4u);
      var sa = dot4(q0, widen_k4(cur.ka0));
      var sb = vec4<f32>(0.0);
      if (NCK > 1u) { sa += dot4(q1, widen_k4(cur.ka1)); }
      if (KB > 4u) {
        sb = dot4(q0, widen_k4(cur.kb0));
        if (NCK > 1u) { sb += dot4(q1, widen_k4(cur.kb1)); }
      }
      sa = team_sum4(lane, sgs, sa);
      if (KB > 4u) { sb = team_sum4(lane, sgs, sb); }
      let visa = visible4(ja, kend, tpos, rw.live);
      let visb = visible4(jb, kend, tpos, rw.live) & vec4<bool>(KB > 4u);
      sa = select(vec4<f32>(NEG_BIG), softcap4(sa), visa);
      sb = select(vec4<f32>(NEG_BIG), softcap4(sb), visb);
      let mn = max(st.m, max(max4(sa), max4(sb)));
      let alpha = select(exp(st.m - mn), 1.0, mn == NEG_BIG);
      let pa = select(vec4<f32>(0.0), exp(sa - vec4<f32>(mn)), visa);
      let pb = select(vec4<f32>(0.0), exp(sb - vec4<f32>(mn)), visb);
      st.l = st.l * alpha + dot(pa + pb, vec4<f32>(1.0));
      let z = vec4<f32>(0.0);
      var t0 = pv(z, pa, widen_v4(cur.va0));
      if (KB > 4u) { t0 = t0 + pv(z, pb, widen_v4(cur.vb0)); }
      st.a0 = st.a0 * alpha + t0;
      if (NCV > 1u) {
        var t1 = pv(z, pa, widen_v4(cur.va1));
        if (KB > 4u) { t1 = t1 + pv(z, pb, widen_v4(cur.vb1)); }
        st.a1 = st.a1 * alpha + t1;
      }
      st.m = mn;
      cur = nxt;
    }
    st = merge_slices(team, tl, st);
    if (nact == 1u) {
      if (writer) { write_out(rw, tl, st); }
      return;
    }
    // Publish this split.
    if (writer) {
      let pa = part_at(blk, split, r);
      if (tl == 0u) { part[pa] = vec4<f32>(st.m, st.l, 0.0, 0.0); }
      if (tl < DV4) { part[pa + 1u + tl] = st.a0; }
      if (NCV > 1u && tl + L < DV4) { part[pa + 1u + tl + L] = st.a1; }
    }
    ks = nks;
    ke = nke;
    kend = nkend;
  }

  // The workgroup that publishes the row block's last splits merges them all (one that holds every split
  // needs no count).
  storageBarrier();
  if (s1 - s0 < nact) {
    if (lid == 0u) { last_w = atomicAdd(&counters[blk], s1 - s0) + s1 - s0; }
    if (workgroupUniformLoad(&last_w) != nact) { return; }
    storageBarrier();
  }
  // Team (slice, r) merges splits slice, slice + KS, ... of row r, eight per step (loads in flight).
  var o = St(NEG_BIG, 0.0, vec4<f32>(0.0), vec4<f32>(0.0));
  var s = slice;
  for (; s + 7u * KS < nact; s += 8u * KS) {
    let p0 = part_at(blk, s, r);
    let d = KS * R * PART;               // part_at(blk, s + KS, r) - part_at(blk, s, r)
    let e0 = part[p0];
    let e1 = part[p0 + d];
    let e2 = part[p0 + 2u * d];
    let e3 = part[p0 + 3u * d];
    let e4 = part[p0 + 4u * d];
    let e5 = part[p0 + 5u * d];
    let e6 = part[p0 + 6u * d];
    let e7 = part[p0 + 7u * d];
    let c = p0 + 1u + vc0;
    let a0 = Rows4(part[c], part[c + d], part[c + 2u * d], part[c + 3u * d]);
    let a1 = Rows4(part[c + 4u * d], part[c + 5u * d], part[c + 6u * d], part[c + 7u * d]);
    var b0: Rows4;
    var b1: Rows4;
    if (NCV > 1u) {
      let c1 = p0 + 1u + vc1;
      b0 = Rows4(part[c1], part[c1 + d], part[c1 + 2u * d], part[c1 + 3u * d]);
      b1 = Rows4(part[c1 + 4u * d], part[c1 + 5u * d], part[c1 + 6u * d], part[c1 + 7u * d]);
    }
    o = merge4(o, vec4<f32>(e0.x, e1.x, e2.x, e3.x), vec4<f32>(e0.y, e1.y, e2.y, e3.y), a0, b0);
    o = merge4(o, vec4<f32>(e4.x, e5.x, e6.x, e7.x), vec4<f32>(e4.y, e5.y, e6.y, e7.y), a1, b1);
  }
  for (; s < nact; s += KS) {
    let p0 = part_at(blk, s, r);
    let e0 = part[p0];
    let z = vec4<f32>(0.0);
    var b: Rows4;
    if (NCV > 1u) { b = Rows4(part[p0 + 1u + vc1], z, z, z); }
    o = merge4(o, vec4<f32>(e0.x, NEG_BIG, NEG_BIG, NEG_BIG), vec4<f32>(e0.y, 0.0, 0.0, 0.0),
               Rows4(part[p0 + 1u + vc0], z, z, z), b);
  }
  o = merge_slices(team, tl, o);
  if (writer) { write_out(rw, tl, o); }
  if (lid == 0u) { atomicStore(&counters[blk], 0u); }
}
