// rope_kv_store: rotate q (into y) and k (into the K cache) and copy v into the V cache, in one dispatch
// (common/rope.wgsl; the caches hold packed halves, common/half.wgsl; rows t >= n_tokens never land in
// the caches). Row t is at position pos_of(t) and lands in cache row phys(seq_of(t), pos_of(t))
// (common/paged_*.wgsl). Threads: the q pairs (T * NH * HD/2), then the k element pairs (2i, 2i + 1) of
// each head, one u32 of the cache each (T * NHKV * HD/2), then the v pairs (T * WV/2).
// Defines: NQ, NK, NT (thread counts: q, q + k, all), NH, NHKV, WV, PAGED (and its defines), and
// common/rope.wgsl's (its table at binding 8).
#include "common/params.wgsl"
#include "common/rope.wgsl"
#include "common/half.wgsl"
#include "common/paged_{{PAGED}}.wgsl"

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<vec2<f32>>;
@group(0) @binding(4) var<storage, read_write> cache_k: array<u32>;
@group(0) @binding(5) var<storage, read_write> cache_v: array<u32>;
@group(0) @binding(6) var<storage, read> ff: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

const HP: u32 = {{HD}}u / 2u;
const WK2: u32 = {{NHKV}}u * HP;     // u32s per K cache row
const WV2: u32 = {{WV}}u / 2u;       // u32s per V cache row

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  if (id < {{NQ}}u) {
    let row_head = id / HP;
    let e = row_head * {{HD}}u + rope_pair(id % HP);
    let r = rope_rotate(pos_of(row_head / {{NH}}u), id % HP, vec2<f32>(q[e.x], q[e.y]));
    y[e.x] = r.x;
    y[e.y] = r.y;
  } else if (id < {{NK}}u) {
    let i = id - {{NQ}}u;
    let row_head = i / HP;
    let t = row_head / {{NHKV}}u;
    if (t >= P.n_tokens) { return; }
    let b = row_head * {{HD}}u;
    let e = 2u * (i % HP);
    let p = pos_of(t);
    let r = vec2<f32>(rope_elem(p, e, k[b + e], k[b + rope_partner(e)]),
                      rope_elem(p, e + 1u, k[b + e + 1u], k[b + rope_partner(e + 1u)]));
    cache_k[phys(seq_of(t), p) * WK2 + i % WK2] = pack_half2(r);
  } else {
    let i = id - {{NK}}u;
    let t = i / WV2;
    if (t >= P.n_tokens) { return; }
    cache_v[phys(seq_of(t), pos_of(t)) * WV2 + i % WV2] = pack_half2(v[i]);
  }
}
