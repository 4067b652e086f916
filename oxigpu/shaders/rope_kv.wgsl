// rope_kv_store: rotate q (into y) and k (into the K cache at row P.pos + t) and copy v into the V cache,
// in one dispatch (common/rope.wgsl; rows t >= n_tokens never land in the caches). Threads: the q pairs
// (T * NH * HD/2), then the k pairs (T * NHKV * HD/2), then the v elements (T * WV).
// Defines: NQ, NK, NT (thread counts: q, q + k, all), NH, NHKV, WV, and common/rope.wgsl's.
#include "common/params.wgsl"
#include "common/rope.wgsl"

@group(0) @binding(1) var<storage, read> q: array<f32>;
@group(0) @binding(2) var<storage, read> k: array<f32>;
@group(0) @binding(3) var<storage, read> v: array<f32>;
@group(0) @binding(4) var<storage, read_write> cache_k: array<f32>;
@group(0) @binding(5) var<storage, read_write> cache_v: array<f32>;
@group(0) @binding(6) var<storage, read> ff: array<f32>;
@group(0) @binding(7) var<storage, read_write> y: array<f32>;

const HP: u32 = {{HD}}u / 2u;
const WK: u32 = {{NHKV}}u * {{HD}}u;

@compute @workgroup_size(256)
fn main(@builtin(workgroup_id) wid: vec3<u32>, @builtin(num_workgroups) nwg: vec3<u32>,
        @builtin(local_invocation_index) lid: u32) {
  let id = (wid.y * nwg.x + wid.x) * 256u + lid;
  if (id >= {{NT}}u) { return; }
  if (id < {{NQ}}u) {
    let row_head = id / HP;
    let e = row_head * {{HD}}u + rope_pair(id % HP);
    let r = rope_rotate(P.pos + row_head / {{NH}}u, id % HP, vec2<f32>(q[e.x], q[e.y]));
    y[e.x] = r.x;
    y[e.y] = r.y;
  } else if (id < {{NK}}u) {
    let i = id - {{NQ}}u;
    let row_head = i / HP;
    let t = row_head / {{NHKV}}u;
    if (t >= P.n_tokens) { return; }
    let e = row_head * {{HD}}u + rope_pair(i % HP);
    let r = rope_rotate(P.pos + t, i % HP, vec2<f32>(k[e.x], k[e.y]));
    cache_k[P.pos * WK + e.x] = r.x;              // e holds the chunk row's offset t * WK
    cache_k[P.pos * WK + e.y] = r.y;
  } else {
    let i = id - {{NK}}u;
    let t = i / {{WV}}u;
    if (t >= P.n_tokens) { return; }
    cache_v[(P.pos + t) * {{WV}}u + i % {{WV}}u] = v[i];
  }
}
