// The K/V columns attention kernels read, from f16 caches (common/half.wgsl): a vec4 column of a row is a
// vec2<u32> of packed halves, kept packed in registers (KRaw, VRaw) until widened where it is used.
// kv/cols_true.wgsl is the same interface over quantized caches. The including kernel declares
// cache_k / cache_v as array<KW> and the constants NKV, D4, DV4 (vec4 columns per K and V head).
alias KW = vec2<u32>;
alias KRaw = vec2<u32>;
alias VRaw = vec2<u32>;

// Vec4 column c of KV head kvh of cache row `row`, as loaded.
fn k_raw(row: u32, kvh: u32, c: u32) -> KRaw { return cache_k[(row * NKV + kvh) * D4 + c]; }
fn v_raw(row: u32, kvh: u32, c: u32) -> VRaw { return cache_v[(row * NKV + kvh) * DV4 + c]; }

fn widen_k(x: KRaw) -> vec4<f32> { return unpack_half4(x); }
fn widen_v(x: VRaw) -> vec4<f32> { return unpack_half4(x); }
