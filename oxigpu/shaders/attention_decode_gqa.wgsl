// Decode attention with one team for all query rows of a KV head (grouped-query attention): the sibling of
// attention_decode.wgsl (same inputs, splits, partials and merge by the last workgroup, same key-source
// hooks) for heads that fill at most two columns of a subgroup, where that kernel gives each query row a
// team of its own and so loads and widens every K and V column once per row. Here a team of L lanes (lane
// c holds vec4 columns c and, where NC = 2, c + L of q, K, V and the output) takes the G query rows of one
// token and KV head (GP: G padded to a power of two; padded rows have q = 0 and are never stored); a
// workgroup is KS such teams (key slices) on one split of those keys. Each team pass takes KB = L / GP keys
// (slices interleaved: a workgroup pass covers BLK = KS KB), each loaded and widened once for all rows:
// every lane forms the GP x KB partial dots of its columns, a transposed butterfly over the team (L - 1
// shuffles) leaves lane i with the whole score of pair i = (row i / KB, key i % KB), so each lane computes
// one exp; the rows' maxima and sums reduce over their KB lanes, and the probabilities reach every lane by
// shuffles for the P V products (L + GP shuffles a pass). The slices' states meet in workgroup memory at a
// split's end, and team k finishes rows k, k + KS, ...: it publishes the split's partials (or writes the
// output where there is one split) and, in the workgroup that finishes a block's splits last, merges
// them, so the rows' merges run side by side. Needs subgroups of at least L lanes, teams aligned in them
// (ops/attention_gqa.py picks it only where the adapter guarantees that; a narrower subgroup writes NaN
// rather than a wrong result).
// Row blocks: block = kvh * T + t, token t at position pos_of(t) of slot seq_of(t) (PAGED: through its
// block table; else the contiguous cache at P.pos + t), so a row's keys, splits and sums are those of a
// one-row step at its position whatever else is in the step (a speculative verification's rows equal the
// one-row steps bit for bit). Splits as attention_decode.wgsl's (DecodeConfig.splits, a workgroup pass =
// BLK keys): T == 1 launches the active splits only, T > 1 takes SPW splits per workgroup. The query rows
// are loaded (and, with KV rope, rotated) once per workgroup into workgroup memory, a (row, column) pair a
// lane (rotating them in every team cost short contexts dearly: docs/perf-log.md, sixteenth session).
// Own key (KV rope: rope_kv_attention): the workgroup whose splits hold the step's own key first rotates
// and writes its K and V rows (attention/kv_rope.wgsl's split_start), then a storage barrier makes them
// visible to its lanes, and every key is read from the cache as the cache path reads it. OWN_REG (an
// alternative, attr gqa_own_reg): no barrier; the pass that holds the key takes its columns from the
// registers the write came from (`own`, the same packed halves), and the masked slots past it too.
// The unrolled parts (named values, no private arrays: drivers may put loop-indexed ones in local memory)
// come from ops/attention_gqa.py: QLOAD, ODECL, SCORES, REDUCE, ROWMAX, PV, ROWSUM, STASH, PASS_FIELDS,
// LOADS, WITH_OWN.
// Defines: D, DV (== D), G, GP, NH, NKV, T, L, NC, KS, KB, MAXS, CHUNK, SPW, SCALE, SOFTCAP, WINDOW, PAGED (and
// common/paged_true.wgsl's), KVQ (and kv/cols_true.wgsl's), KV (cache | rope, and its hooks' defines).
#include "common/params.wgsl"
#include "common/half.wgsl"
#include "math.wgsl"
#include "common/paged_{{PAGED}}.wgsl"
#include "kv/cols_{{KVQ}}.wgsl"
#include "attention/decode_io.wgsl"

const D4: u32 = {{D}}u / 4u;
const DV4: u32 = {{DV}}u / 4u;
const G: u32 = {{G}}u;
const GP: u32 = {{GP}}u;
const NH: u32 = {{NH}}u;
const NKV: u32 = {{NKV}}u;
const T: u32 = {{T}}u;
const L: u32 = {{L}}u;
const KS: u32 = {{KS}}u;
const WG: u32 = L * KS;
const KB: u32 = {{KB}}u;
const BLK: u32 = KS * KB;
const NC: u32 = {{NC}}u;          // vec4 columns a lane: tl, tl + L
const NCK: u32 = NC;              // (the hooks' names)
const NCV: u32 = NC;
const MAXS: u32 = {{MAXS}}u;
const CHUNK: u32 = {{CHUNK}}u;
const SPW: u32 = {{SPW}}u;
const WINDOW: u32 = {{WINDOW}}u;
const SOFTCAP: f32 = {{SOFTCAP}};
const SCALE: f32 = {{SCALE}};
const OWN_REG: bool = {{OWN_REG}};
const PART: u32 = DV4 + 1u;       // vec4s per partial row: (m, l, 0, 0), then the DV accumulator

#include "attention/team_sg.wgsl"

#include "attention/kv_{{KV}}.wgsl"

var<workgroup> last_w: u32;
var<workgroup> tml: array<vec2<f32>, KS * GP>;          // the slices' (m, l) per row
var<workgroup> tacc: array<vec4<f32>, KS * GP * DV4>;   // ... and accumulators
var<workgroup> qs: array<vec4<f32>, G * D4>;             // the G query rows as loaded (rotated: KV rope)

// Keys token t's rows see: [lo, hi); empty for padding tokens.
fn key_range(t: u32) -> vec2<u32> {
  if (t >= P.n_tokens) { return vec2<u32>(0u); }
  let p = pos_of(t);
  var lo = 0u;
  if (WINDOW > 0u && p + 1u > WINDOW) { lo = p + 1u - WINDOW; }
  return vec2<u32>(lo, p + 1u);
}

// (keys per split, active splits) for the keys in range (DecodeConfig.splits).
fn splits_of(range: vec2<u32>) -> vec2<u32> {
  let n_keys = range.y - range.x;
  let kps = max(CHUNK, (n_keys + MAXS * BLK - 1u) / (MAXS * BLK) * BLK);
  return vec2<u32>(kps, max(1u, (n_keys + kps - 1u) / kps));
}

fn softcap1(s: f32) -> f32 {
  if (SOFTCAP > 0.0) { return SOFTCAP * tanh(clamp(s / SOFTCAP, -15.0, 15.0)); }
  return s;
}

struct Pass { {{PASS_FIELDS}} }

// OWN_REG: pass p with its keys i0 .. KB - 1 taken from `own` (the key at i0, then the masked slots that
// loads clamped to its row, which may not be written yet).
{{WITH_OWN}}

// Column c of the K and V rows of keys j0 .. j0 + KB - 1 of slot s, clamped to key `last` (a written row).
fn load_pass(s: u32, j0: u32, last: u32, kvh: u32, c: u32) -> Pass {
  var p: Pass;
{{LOADS}}
  return p;
}

// Index of the (m, l) vec4 of split s, row r of block blk in `part` (the accumulator follows it).
fn part_at(blk: u32, s: u32, r: u32) -> u32 { return ((blk * MAXS + s) * GP + r) * PART; }

// The KS slices' states of row r merged (workgroup memory), column c: (m, l) and the accumulator.
fn merge_slices(r: u32, c: u32) -> array<vec4<f32>, 2> {
  var m = NEG_BIG;
  for (var i = 0u; i < KS; i++) { m = max(m, tml[i * GP + r].x); }
  var l = 0.0;
  var o = vec4<f32>(0.0);
  for (var i = 0u; i < KS; i++) {
    let e = tml[i * GP + r];
    let w = select(exp(e.x - m), 0.0, e.x == NEG_BIG);
    l += w * e.y;
    o += w * tacc[(i * GP + r) * DV4 + c];
  }
  return array<vec4<f32>, 2>(vec4<f32>(m, l, 0.0, 0.0), o);
}

// Column c of row r of block blk merged over its nact splits' partials (four at a time: loads in flight).
fn merge_row(blk: u32, r: u32, nact: u32, c: u32) -> vec4<f32> {
  var m = NEG_BIG;
  var l = 0.0;
  var o = vec4<f32>(0.0);
  let d = GP * PART;                    // part_at(blk, s + 1, r) - part_at(blk, s, r)
  var s = 0u;
  for (; s + 4u <= nact; s += 4u) {
    let p0 = part_at(blk, s, r);
    let e = mat4x4<f32>(part[p0], part[p0 + d], part[p0 + 2u * d], part[p0 + 3u * d]);
    let a0 = part[p0 + 1u + c];
    let a1 = part[p0 + 1u + c + d];
    let a2 = part[p0 + 1u + c + 2u * d];
    let a3 = part[p0 + 1u + c + 3u * d];
    let m4 = vec4<f32>(e[0].x, e[1].x, e[2].x, e[3].x);
    let mx = max(m, max(max(m4.x, m4.y), max(m4.z, m4.w)));
    let w = select(exp(m4 - vec4<f32>(mx)), vec4<f32>(0.0), m4 == vec4<f32>(NEG_BIG));
    let sc = select(exp(m - mx), 1.0, mx == NEG_BIG);
    l = l * sc + dot(w, vec4<f32>(e[0].y, e[1].y, e[2].y, e[3].y));
    o = o * sc + ((w.x * a0 + w.y * a1) + (w.z * a2 + w.w * a3));
    m = mx;
  }
  for (; s < nact; s++) {
    let p0 = part_at(blk, s, r);
    let e = part[p0];
    let mx = max(m, e.x);
    let w = select(exp(e.x - mx), 0.0, e.x == NEG_BIG);
    let sc = select(exp(m - mx), 1.0, mx == NEG_BIG);
    l = l * sc + w * e.y;
    o = o * sc + w * part[p0 + 1u + c];
    m = mx;
  }
  return select(vec4<f32>(0.0), o / l, l > 0.0);
}

@compute @workgroup_size(WG)
fn main(lane: Lane, @builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>) {
  let linear = wid.y * nwg.x + wid.x;
  // T == 1: a block's nact active splits are consecutive workgroups (Attention.decode_groups launches
  // NKV * nact); else MAXS / SPW per block
  let per = select((MAXS + SPW - 1u) / SPW, splits_of(key_range(0u)).y, T == 1u);
  let blk = linear / per;               // kvh * T + t
  if (blk >= NKV * T) { return; }
  let t = blk % T;
  let kvh = blk / T;
  let range = key_range(t);
  let sp = splits_of(range);
  let kps = sp.x;
  let nact = sp.y;
  let s0 = linear % per * SPW;          // this workgroup's splits: s0 .. s1 - 1
  if (s0 >= nact) { return; }
  let s1 = min(s0 + SPW, nact);

  let sgs = team_setup(lane);
  let team = lane.lid / L;              // the key slice
  let tl = lane.lid % L;                // the column
  let tb = lane.sg_lane & ~(L - 1u);    // the team's first lane in its subgroup
  let live = t < P.n_tokens;
  let p = select(0u, pos_of(t), live);
  let rw = Row(t, kvh * G, live, true, p, select(0u, seq_of(t), live));
  if (sgs < L) {                        // workgroup-uniform: the shuffles below need L lanes a subgroup
    let nan = bitcast<f32>(0x7fc00000u | (tl & 1u));   // (a run-time value: Tint refuses a constant NaN)
    for (var i = team * L + tl; i < G * DV4; i += WG) { out[(t * NH + kvh * G) * DV4 + i] = vec4<f32>(nan); }
    return;
  }
  // the query rows loaded (and rotated) once per workgroup, a (row, column) pair a lane, for every team
  for (var i = lane.lid; i < G * D4; i += WG) {
    var x = vec4<f32>(0.0);
    if (live) { x = q_col(p, (t * NH + kvh * G) * D4 + i / D4 * D4, i % D4); }
    qs[i] = x;
  }
  workgroupBarrier();
{{QLOAD}}
  var ks = range.x + s0 * kps;
  var ke = min(ks + kps, range.y);
  // software pipelined: the next pass's loads are in flight while this one computes (after a split's
  // last pass, the next split's first; after the workgroup's last, a clamped re-read of its last key)
  var c: Pass;
  if (OWN_REG && ke > ks) { c = load_pass(rw.s, ks + team * KB, ke - 1u, kvh, tl); }
  // the workgroup holding the step's own key writes its rows (KV rope) and reads them back from the cache
  split_start(lane, sgs, rw, team, tl, kvh, rw, true, min(range.x + s1 * kps, range.y));
  if (OWN_KEY && !OWN_REG) { storageBarrier(); }
  if (!OWN_REG && ke > ks) { c = load_pass(rw.s, ks + team * KB, ke - 1u, kvh, tl); }
  for (var split = s0; split < s1; split++) {
    // each split summed as a workgroup of its own would: a row's result does not depend on SPW
    var m = NEG_BIG;                    // the running maximum of this lane's row (row tl / KB)
    var ls = 0.0;                       // this lane's share of its row's sum
{{ODECL}}
    let npass = (ke - ks + BLK - 1u) / BLK;
    let nks = ke;                       // the next split's keys
    let nke = min(nks + kps, range.y);
    let more = SPW > 1u && split + 1u < s1;
    for (var b = 0u; b < npass; b++) {
      let j0 = ks + (b * KS + team) * KB;
      var nj = j0 + BLK;
      var nlast = ke - 1u;
      if (more && b + 1u == npass) {
        nj = nks + team * KB;
        nlast = nke - 1u;
      }
      let nx = load_pass(rw.s, nj, nlast, kvh, tl);
      if (OWN_REG && OWN_KEY && p < j0 + KB) { c = with_own(c, select(0u, p - j0, p > j0)); }
{{SCORES}}
{{REDUCE}}
      let j = j0 + tl % KB;
      var vis = live && j < ke && j <= p;
      if (WINDOW > 0u) { vis = vis && j + WINDOW > p; }
      let sc = select(NEG_BIG, softcap1(tot), vis);
      var mt = sc;
{{ROWMAX}}
      let mn = max(m, mt);
      let alpha = select(exp(m - mn), 1.0, mn == NEG_BIG);
      let pr = select(0.0, exp(sc - mn), vis);
      ls = ls * alpha + pr;
      m = mn;
{{PV}}
      c = nx;
    }
{{ROWSUM}}
    // the slices' states through workgroup memory; team k finishes rows k, k + KS, ...
{{STASH}}
    workgroupBarrier();
    for (var r = team; r < G; r += KS) {
      for (var col = tl; col < DV4; col += L) {
        let st = merge_slices(r, col);
        if (nact == 1u) {
          out[(t * NH + kvh * G + r) * DV4 + col] = select(vec4<f32>(0.0), st[1] / st[0].y, st[0].y > 0.0);
        } else {
          let pa = part_at(blk, split, r);
          if (col == 0u) { part[pa] = st[0]; }
          part[pa + 1u + col] = st[1];
        }
      }
    }
    if (nact == 1u) { return; }
    workgroupBarrier();
    ks = nks;
    ke = nke;
  }

  // The workgroup that publishes the block's last splits merges them all (one that holds every split needs
  // no count).
  storageBarrier();
  if (s1 - s0 < nact) {
    if (lane.lid == 0u) { last_w = atomicAdd(&counters[blk], s1 - s0) + s1 - s0; }
    if (workgroupUniformLoad(&last_w) != nact) { return; }
    storageBarrier();
  }
  for (var r = team; r < G; r += KS) {
    for (var col = tl; col < DV4; col += L) {
      out[(t * NH + kvh * G + r) * DV4 + col] = merge_row(blk, r, nact, col);
    }
  }
  if (lane.lid == 0u) { atomicStore(&counters[blk], 0u); }
}
