// rope_kv_attention's hooks of attention_decode.wgsl (decode: one row per sequence, T == 1 or PAGED):
// the step's q, k and v rows arrive unrotated and uncached. Each team rotates its q columns as it loads
// them; a row's own key (its position p, in the last active split) never comes from the cache: the
// workgroups of that split rotate k in registers and take v from `v`, both rounded to halves as the cache
// stores them (so the key counts exactly as it will in later steps, and as the cache path counts it), and
// the token's first row block's workgroup of each KV head stores both rows in the caches (at phys(s, p)).
// In attention_decode.wgsl the pass holding that key reads its cache row too (being written: racy) and
// replaces it before any use (OWN_KEY), so no workgroup waits for another's write; attention_decode_gqa.wgsl
// (one workgroup holds a KV head's key) writes the rows first, then reads them back after a storage barrier.
// Defines: common/rope.wgsl's (its table at binding 10), QK_NORM (true | false: attention/qk_norm_*.wgsl).
#include "common/rope.wgsl"
#include "attention/qk_norm_{{QK_NORM}}.wgsl"

@group(0) @binding(2) var<storage, read_write> cache_k: array<KW>;   // f16 caches only (KVQ false)
@group(0) @binding(3) var<storage, read_write> cache_v: array<KW>;
@group(0) @binding(7) var<storage, read> k: array<vec4<f32>>;
@group(0) @binding(8) var<storage, read> v: array<vec4<f32>>;
@group(0) @binding(9) var<storage, read> ff: array<f32>;

// Vec4 column c of the query head at vec4 qb, norm-weighted (QK_NORM) and rotated at position p.
fn q_col(p: u32, qb: u32, c: u32) -> vec4<f32> {
  let e = rope_partners(c);
  let w = vec4<f32>(qn_w(4u * c), qn_w(4u * c + 1u), qn_w(4u * c + 2u), qn_w(4u * c + 3u));
  return rope_col(p, c, q[qb + c] * w, vec4<f32>(q[qb + e.x / 4u][e.x % 4u] * qn_w(e.x),
                  q[qb + e.y / 4u][e.y % 4u] * qn_w(e.y), q[qb + e.z / 4u][e.z % 4u] * qn_w(e.z),
                  q[qb + e.w / 4u][e.w % 4u] * qn_w(e.w)));
}

// Vec4 column c of the step's key head at vec4 kb, norm-weighted, rotated at position p, times inv (the
// head's 1 / rms with QK_NORM) and rounded to halves.
fn k_col(p: u32, kb: u32, c: u32, inv: f32) -> vec4<f32> {
  let e = rope_partners(c);
  let w = vec4<f32>(kn_w(4u * c), kn_w(4u * c + 1u), kn_w(4u * c + 2u), kn_w(4u * c + 3u));
  let xp = vec4<f32>(k[kb + e.x / 4u][e.x % 4u] * kn_w(e.x), k[kb + e.y / 4u][e.y % 4u] * kn_w(e.y),
                     k[kb + e.z / 4u][e.z % 4u] * kn_w(e.z), k[kb + e.w / 4u][e.w % 4u] * kn_w(e.w));
  return round_half4(rope_col(p, c, k[kb + c] * w, xp) * inv);
}

// 1 / rms of a head from each lane's sum of squares of its columns, in every lane of the team.
// Workgroup-uniform control flow (the team sums may hold barriers).
fn head_inv(lane: Lane, sgs: u32, ss: f32) -> f32 {
  return inverseSqrt(team_sum1(lane, sgs, ss) / f32({{HD}}u) + {{QK_EPS}});
}

// The query head's 1 / rms (1 without QK_NORM); the team's columns tl and tl + L of the head at qb.
fn q_inv(lane: Lane, sgs: u32, live: bool, qb: u32, tl: u32) -> f32 {
  if (!QK_NORM) { return 1.0; }
  var ss = 0.0;
  if (live && tl < D4) { ss = dot(q[qb + tl], q[qb + tl]); }
  if (NCK > 1u && live && tl + L < D4) { ss += dot(q[qb + tl + L], q[qb + tl + L]); }
  return head_inv(lane, sgs, ss);
}

// The step's key head's 1 / rms (1 without QK_NORM), as q_inv.
fn k_inv(lane: Lane, sgs: u32, kb: u32, tl: u32) -> f32 {
  if (!QK_NORM) { return 1.0; }
  var ss = 0.0;
  if (tl < D4) { ss = dot(k[kb + tl], k[kb + tl]); }
  if (NCK > 1u && tl + L < D4) { ss += dot(k[kb + tl + L], k[kb + tl + L]); }
  return head_inv(lane, sgs, ss);
}


// The row's own key (position p) comes from registers (attention_decode.wgsl's `own`), not from its cache row
// (attention_decode_gqa.wgsl: its writes must be made visible before it is read back).
const OWN_KEY: bool = true;

// At a split's start: in the split holding the block's key (bt: its token, at position bt.p) the key and
// value columns go to `own` (k rotated in registers, both packed as the cache stores them), for the pass
// that holds the key (attention_decode.wgsl's with_own), and the `writer` block's first team writes them to
// the cache row of that key. Call in workgroup-uniform control flow (the team sums may hold barriers).
fn split_start(lane: Lane, sgs: u32, rw: Row, team: u32, tl: u32, kvh: u32, bt: Row, writer: bool, ke: u32) {
  if (ke <= bt.p) { return; }              // workgroup-uniform: not the last split
  var k0 = vec4<f32>(0.0);
  var k1 = vec4<f32>(0.0);
  let kb = (bt.t * NKV + kvh) * D4;
  let inv = k_inv(lane, sgs, kb, tl);
  if (tl < D4) { k0 = k_col(bt.p, kb, tl, inv); }
  if (NCK > 1u && tl + L < D4) { k1 = k_col(bt.p, kb, tl + L, inv); }
  let vb = (bt.t * NKV + kvh) * DV4;
  own = Own(pack_half4(k0), pack_half4(k1), pack_half4(v[vb + min(tl, DV4 - 1u)]),
            pack_half4(v[vb + min(tl + L, DV4 - 1u)]));
  if (writer && team == 0u && rw.live) {
    let row = phys(bt.s, bt.p);
    let kr = (row * NKV + kvh) * D4;
    let vr = (row * NKV + kvh) * DV4;
    if (tl < D4) { cache_k[kr + tl] = own.k0; }
    if (NCK > 1u && tl + L < D4) { cache_k[kr + tl + L] = own.k1; }
    if (tl < DV4) { cache_v[vr + tl] = own.v0; }
    if (NCV > 1u && tl + L < DV4) { cache_v[vr + tl + L] = own.v1; }
  }
}
