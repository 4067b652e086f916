// What both split-KV decode kernels (attention_decode.wgsl, attention_decode_gqa.wgsl) share with their
// key-source hooks (attention/kv_cache.wgsl, kv_rope.wgsl): the bindings, a query row and the step's own
// key columns. The kernel defines KRaw / VRaw (kv/cols_*.wgsl).
@group(0) @binding(1) var<storage, read> q: array<vec4<f32>>;
@group(0) @binding(4) var<storage, read_write> out: array<vec4<f32>>;
@group(0) @binding(5) var<storage, read_write> part: array<vec4<f32>>;
@group(0) @binding(6) var<storage, read_write> counters: array<atomic<u32>>;

// A query row: token t at position p of the sequence in slot s, query head h; `valid`: a row of the step
// at all, `live`: a valid row of a token < n_tokens.
struct Row { t: u32, h: u32, live: bool, valid: bool, p: u32, s: u32 }

// The step's own key and value columns c0 and c1 (kv_rope.wgsl's split_start sets them in the split that
// holds the key).
struct Own { k0: KRaw, k1: KRaw, v0: VRaw, v1: VRaw }
var<private> own: Own;
