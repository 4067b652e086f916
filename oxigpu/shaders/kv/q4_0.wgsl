// q4_0 KV-cache rows (ggml's blocks, oxigpu/quant/kvcache.py): per 32 values 18 bytes, the f16 scale d then
// 16 bytes whose low nibbles are values 0 .. 15 and high nibbles values 16 .. 31, value d * (q - 8). Rows
// hold an even number of blocks (whole words); a block starts at a word (even blocks) or half a word in.
// Quantization is ggml's quantize_row_q4_0_ref: m = the value of largest magnitude (the first such),
// d = m / -8, q = min(15, trunc(x * (1 / d) + 8.5)), d stored as f16 rounded to nearest even.
#include "kv/q8_0.wgsl"
const q4_0_W64: u32 = 9u;   // words per 64 values: two blocks

// The scale's word and the nibbles' first and second of values e .. e + 3 (kv/q8_0.wgsl).
fn q4_0_at(e: u32) -> vec3<u32> { return kv_block_words(e, 18u, e % 16u); }

fn q4_0_get4(ws: u32, w0: u32, w1: u32, e: u32) -> vec4<f32> {
  let odd = (e / 32u) % 2u == 1u;
  let d = unpack2x16float(ws)[select(0u, 1u, odd)];
  let b = select((w0 >> 16u) | (w1 << 16u), w0, odd);
  let n = (b >> select(0u, 4u, e % 32u >= 16u)) & 0x0F0F0F0Fu;
  return d * (vec4<f32>((vec4<u32>(n) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu)) - vec4<f32>(8.0));
}

// The two blocks of values x[0 .. 32) and x[32 .. 64) as 9 words (out[0 .. q4_0_W64)).
fn q4_0_put64(x: ptr<function, array<f32, 64>>) -> array<u32, 32> {
  var bytes: array<u32, 36>;
  for (var b = 0u; b < 2u; b++) {
    var amax = 0.0;
    var m = 0.0;
    for (var i = 0u; i < 32u; i++) {
      let v = (*x)[32u * b + i];
      if (amax < abs(v)) { amax = abs(v); m = v; }
    }
    let d = m * -0.125;                       // = m / -8 exactly
    let id = select(0.0, kv_div(1.0, d), d != 0.0);
    let dh = half_bits(d);
    bytes[18u * b] = dh & 0xFFu;
    bytes[18u * b + 1u] = dh >> 8u;
    for (var i = 0u; i < 16u; i++) {
      let lo = min(15u, u32(max(trunc((*x)[32u * b + i] * id + 8.5), 0.0)));
      let hi = min(15u, u32(max(trunc((*x)[32u * b + 16u + i] * id + 8.5), 0.0)));
      bytes[18u * b + 2u + i] = lo | (hi << 4u);
    }
  }
  var w: array<u32, 32>;
  for (var i = 0u; i < 9u; i++) {
    w[i] = bytes[4u * i] | (bytes[4u * i + 1u] << 8u) | (bytes[4u * i + 2u] << 16u) | (bytes[4u * i + 3u] << 24u);
  }
  return w;
}
