// q8_0 KV-cache rows (ggml's blocks, oxigpu/quant/kvcache.py): per 32 values 34 bytes, the f16 scale d then
// 32 int8 q, value d * q. A row holds an even number of blocks, so it is whole words, and a block starts
// at a word (even blocks) or half a word in (odd ones). Quantization is ggml's quantize_row_q8_0_ref:
// d = amax / 127, q = roundf(x * (1 / d)) (half away from zero), d stored as f16 rounded to nearest even.
#include "common/half.wgsl"
const q8_0_W64: u32 = 17u;   // words per 64 values: two blocks

// Words of the vec4 of values e .. e + 3 (e % 4 == 0) from the row's first word, in rows of bb-byte blocks
// (an f16 scale, then the quants; those of value e at byte qoff after it): the scale's word, the quants'
// first and second (the quants sit at byte 2 mod 4 in even blocks).
fn kv_block_words(e: u32, bb: u32, qoff: u32) -> vec3<u32> {
  let sb = bb * (e / 32u);
  let qb = sb + 2u + qoff;
  // odd blocks' quants are word-aligned: their second word is never read (nor past the row's end)
  return vec3<u32>(sb / 4u, qb / 4u, qb / 4u + select(1u, 0u, (e / 32u) % 2u == 1u));
}

fn q8_0_at(e: u32) -> vec3<u32> { return kv_block_words(e, 34u, e % 32u); }

fn q8_0_get4(ws: u32, w0: u32, w1: u32, e: u32) -> vec4<f32> {
  let odd = (e / 32u) % 2u == 1u;
  let d = unpack2x16float(ws)[select(0u, 1u, odd)];
  let q = select((w0 >> 16u) | (w1 << 16u), w0, odd);        // odd blocks' quants are word-aligned
  return d * vec4<f32>((vec4<i32>(bitcast<i32>(q)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// ggml's roundf: half away from zero (WGSL's round() rounds half to even).
fn kv_roundf(x: f32) -> f32 { return sign(x) * floor(abs(x) + 0.5); }

// a / b as IEEE division rounds it (WGSL's division may be off by an ulp or two on some adapters): the
// quotient's neighbour with the smaller remainder (exact where fma is fused) replaces it.
fn kv_div(a: f32, b: f32) -> f32 {
  var r = a / b;
  let up = bitcast<f32>(bitcast<u32>(r) + 1u);
  let dn = bitcast<f32>(bitcast<u32>(r) - 1u);
  let e0 = abs(fma(-b, r, a));
  let eu = abs(fma(-b, up, a));
  let ed = abs(fma(-b, dn, a));
  if (eu < e0 && eu <= ed) { r = up; } else if (ed < e0) { r = dn; }
  return r;
}

// The two blocks of values x[0 .. 32) and x[32 .. 64) as 17 words (out[0 .. q8_0_W64)).
fn q8_0_put64(x: ptr<function, array<f32, 64>>) -> array<u32, 32> {
  var bytes: array<u32, 68>;   // one byte a word, assembled into words at the end
  for (var b = 0u; b < 2u; b++) {
    var amax = 0.0;
    for (var i = 0u; i < 32u; i++) { amax = max(amax, abs((*x)[32u * b + i])); }
    let d = kv_div(amax, 127.0);
    let id = select(0.0, kv_div(1.0, d), d != 0.0);
    let dh = half_bits(d);
    bytes[34u * b] = dh & 0xFFu;
    bytes[34u * b + 1u] = dh >> 8u;
    for (var i = 0u; i < 32u; i++) {
      bytes[34u * b + 2u + i] = u32(i32(kv_roundf((*x)[32u * b + i] * id))) & 0xFFu;
    }
  }
  var w: array<u32, 32>;
  for (var i = 0u; i < 17u; i++) {
    w[i] = bytes[4u * i] | (bytes[4u * i + 1u] << 8u) | (bytes[4u * i + 2u] << 16u) | (bytes[4u * i + 3u] << 24u);
  }
  return w;
}
