// The `attention` op's hooks of attention_decode.wgsl (kv_rope.wgsl has rope_kv_attention's): q as
// given, every key and value read from the cache.

@group(0) @binding(2) var<storage, read> cache_k: array<KW>;   // kv/cols_{{KVQ}}.wgsl
@group(0) @binding(3) var<storage, read> cache_v: array<KW>;

// Vec4 column c of the query head at vec4 qb (a row at position p).
fn q_col(p: u32, qb: u32, c: u32) -> vec4<f32> { return q[qb + c]; }

// The query head's norm scale: none here (kv_rope.wgsl may norm q).
fn q_inv(lane: Lane, sgs: u32, live: bool, qb: u32, tl: u32) -> f32 { return 1.0; }

// Every key comes from the cache, the step's own too.
const OWN_KEY: bool = false;

// Nothing to do at a split's start.
fn split_start(lane: Lane, sgs: u32, rw: Row, team: u32, tl: u32, kvh: u32, bt: Row, writer: bool, ke: u32) {}
