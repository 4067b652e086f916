// attention_mma.wgsl's cache loads from f16 caches: 8 halves a vec4<u32>, staged as they are.
alias MW = vec4<u32>;

// 8 halves (vec4<u32> c8 of the head) of KV head kvh of cache row `row`, of V or K.
fn kv8(row: u32, kvh: u32, c8: u32, V: bool) -> vec4<u32> {
  if (V) { return cache_v[(row * NKV + kvh) * (DV / 8u) + c8]; }
  return cache_k[(row * NKV + kvh) * (D / 8u) + c8];
}

// Word w (halves 2w, 2w + 1) of KV head kvh of cache row `row`: the word-per-lane staging (MmaTile.W).
fn kvw(row: u32, kvh: u32, w: u32, V: bool) -> u32 {
  if (V) {
    let i = (row * NKV + kvh) * (DV / 2u) + w;
    return cache_v[i / 4u][i % 4u];
  }
  let i = (row * NKV + kvh) * (D / 2u) + w;
  return cache_k[i / 4u][i % 4u];
}
