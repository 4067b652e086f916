// What gemm_mma/q32r.wgsl and q32r16.wgsl share: the int8 of a decoded block staged in f16 arithmetic.
// put_words(o, b): the block's QW words b from the word that holds its first byte, decoded by
// q32r_<type>.wgsl's q32p from its body words and d, as 32 halves at ws[o], ws[o + WST] ..
// Every type here is d (2 bytes), then a body of QW - 1 words. In GGUF's layout the body starts 2 bytes
// into the words, after d; a paired type's block (backends/wgpu/layout.py) is [body][d] where it starts
// word-aligned, [d][body] where it starts 2 bytes in (its d in the upper half of b[0]): the body whole words.
fn block_q32(b: array<u32, QW>, odd: bool) -> Q32 {
  var w: array<u32, QW - 1u>;
  if (PAIRED) {
    for (var i = 0u; i < QW - 1u; i++) { w[i] = select(b[i], b[i + 1u], odd); }
    return q32p(w, unpack2x16float(select(b[QW - 1u], b[0] >> 16u, odd)).x);
  }
  // GGUF's layout: body word i is bytes 4 i + 2 .. of the block's words aligned to its first byte
  for (var i = 0u; i < QW - 1u; i++) { w[i] = (b[i] >> 16u) | (b[i + 1u] << 16u); }
  return q32p(w, unpack2x16float(b[0]).x);
}

// The 4 int8 of word w (byte 0 first) times s, as halves at ws[o], ws[o + WST] ..: byte q ^ 0x80 = q + 128
// as the low bits of 1024 (0x6400) is 1152 + q, exact; minus 1152, q; times s (d: an f16 value) rounded
// once, as the f32 product rounded to f16 is (no int -> float -> half conversions per weight).
fn put4(o: u32, w: u32, s: vec2<f16>) {
  let u = w ^ 0x80808080u;
  let a = (h2((u & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;          // bytes 0 and 2
  let b = (h2(((u >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;  // bytes 1 and 3
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn put_words(o: u32, b: array<u32, QW>, odd: bool) {
  let q = block_q32(b, odd);
  let d = vec2<f16>(f16(q.a));
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, q.lo[i], d);
    put4(o + (16u + 4u * i) * WST, q.hi[i], d);
  }
}
