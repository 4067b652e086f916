// The KV cache's storage (graph/ir.py: caches are f16): IEEE half values, two per u32 (the even element
// in the low 16 bits), so no adapter needs the shader-f16 feature. Writes round to nearest even with
// integer ops, bit-exact with numpy's float16 on every adapter (WGSL leaves pack2x16float's rounding to
// the implementation); reads widen exactly (unpack2x16float). A vec4 column of a cache row is a
// vec2<u32>.

// The half bits of x rounded to nearest even: beyond the f16 range infinity, NaN stays NaN.
fn half_bits(x: f32) -> u32 {
  let b = bitcast<u32>(x);
  let sign = (b >> 16u) & 0x8000u;
  let a = b & 0x7FFFFFFFu;
  if (a > 0x7F800000u) { return sign | 0x7E00u; }       // NaN
  if (a >= 0x477FF000u) { return sign | 0x7C00u; }      // |x| >= 65520 (65504 + half a step): infinity
  if (a >= 0x38800000u) {                               // |x| >= 2^-14: a normal half
    let r = a - 0x38000000u;                            // exponent rebiased from 127 to 15
    return sign | ((r + 0xFFFu + ((r >> 13u) & 1u)) >> 13u);
  }
  if (a <= 0x33000000u) { return sign; }                // |x| <= 2^-25 (half the least subnormal): zero
  let m = (a & 0x7FFFFFu) | 0x800000u;                  // a subnormal half: m * 2^(e - 150) in 2^-24 units
  let sh = 126u - (a >> 23u);                           // 14 .. 24
  return sign | ((m + (1u << (sh - 1u)) - 1u + ((m >> sh) & 1u)) >> sh);
}

fn pack_half2(x: vec2<f32>) -> u32 { return half_bits(x.x) | (half_bits(x.y) << 16u); }

fn pack_half4(x: vec4<f32>) -> vec2<u32> { return vec2<u32>(pack_half2(x.xy), pack_half2(x.zw)); }

fn unpack_half4(w: vec2<u32>) -> vec4<f32> { return vec4<f32>(unpack2x16float(w.x), unpack2x16float(w.y)); }

// x as the cache stores it.
fn round_half4(x: vec4<f32>) -> vec4<f32> { return unpack_half4(pack_half4(x)); }
