// attention_mma.wgsl's cache loads where a cache is block-quantized: two vec4 columns dequantized
// (kv/cols_true.wgsl) and packed as the 8 halves the f16 tile stages.
#include "kv/cols_true.wgsl"
alias MW = u32;

fn kv8(row: u32, kvh: u32, c8: u32, V: bool) -> vec4<u32> {
  var a: vec4<f32>;
  var b: vec4<f32>;
  if (V) {
    a = v_raw(row, kvh, 2u * c8);
    b = v_raw(row, kvh, 2u * c8 + 1u);
  } else {
    a = k_raw(row, kvh, 2u * c8);
    b = k_raw(row, kvh, 2u * c8 + 1u);
  }
  return vec4<u32>(pack2x16float(a.xy), pack2x16float(a.zw), pack2x16float(b.xy), pack2x16float(b.zw));
}

// Word w (halves 2w, 2w + 1) of KV head kvh of cache row `row`: the word-per-lane staging (MmaTile.W).
fn kvw(row: u32, kvh: u32, w: u32, V: bool) -> u32 {
  var a: vec4<f32>;
  if (V) { a = v_raw(row, kvh, w / 2u); } else { a = k_raw(row, kvh, w / 2u); }
  return select(pack2x16float(a.xy), pack2x16float(a.zw), (w & 1u) == 1u);
}
