// f16 KV-cache rows as u32 words (common/half.wgsl: two halves a word, the even value low), in the form
// of kv/q8_0.wgsl's functions, for a cache whose other half is quantized (kv/cols_true.wgsl).
#include "common/half.wgsl"
const f16_W64: u32 = 32u;   // words per 64 values

// Words of the vec4 of values e .. e + 3 (e % 4 == 0) from the row's first word: (unused, first, second).
fn f16_at(e: u32) -> vec3<u32> { return vec3<u32>(e / 2u, e / 2u, e / 2u + 1u); }

fn f16_get4(ws: u32, w0: u32, w1: u32, e: u32) -> vec4<f32> {
  return vec4<f32>(unpack2x16float(w0), unpack2x16float(w1));
}

// The words of 64 values (out[0 .. f16_W64)).
fn f16_put64(x: ptr<function, array<f32, 64>>) -> array<u32, 32> {
  var w: array<u32, 32>;
  for (var i = 0u; i < 32u; i++) { w[i] = pack_half2(vec2<f32>((*x)[2u * i], (*x)[2u * i + 1u])); }
  return w;
}
