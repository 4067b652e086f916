// What gemm_mma/q32r.wgsl and q32r16.wgsl share: the int8 of a decoded block staged in f16 arithmetic.
// put_words(o, b): the block's words b, aligned to its first byte (q32r_<type>.wgsl's q32b decodes them),
// as 32 halves at ws[o], ws[o + WST] ..

// Bytes 4 i + 2 .. 4 i + 5 of the block words b (every type here starts with its 2-byte d).
fn mid(b: array<u32, QW>, i: u32) -> u32 { return (b[i] >> 16u) | (b[i + 1u] << 16u); }

// The 4 int8 of word w (byte 0 first) times s, as halves at ws[o], ws[o + WST] ..: byte q ^ 0x80 = q + 128
// as the low bits of 1024 (0x6400) is 1152 + q, exact; minus 1152, q; times s (d: an f16 value) rounded
// once, as the f32 product rounded to f16 is (no int -> float -> half conversions per weight).
fn put4(o: u32, w: u32, s: vec2<f16>) {
  let u = w ^ 0x80808080u;
  let a = (h2((u & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;          // bytes 0 and 2
  let b = (h2(((u >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1152.0)) * s;  // bytes 1 and 3
  ws[o] = a.x; ws[o + WST] = b.x; ws[o + 2u * WST] = a.y; ws[o + 3u * WST] = b.y;
}

fn put_words(o: u32, b: array<u32, QW>) {
  let q = q32b(b);
  let d = vec2<f16>(f16(q.a));
  for (var i = 0u; i < 4u; i++) {
    put4(o + 4u * i * WST, q.lo[i], d);
    put4(o + (16u + 4u * i) * WST, q.hi[i], d);
  }
}
