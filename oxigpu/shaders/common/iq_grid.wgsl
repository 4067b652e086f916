// The lookup table of the IQ snippets (quant/iq*.wgsl; oxigpu/quant/iquants.py table_words): for the
// grid types ggml's grid (iq2xxs_grid ...) as u32 words, each byte one element as int8, an entry of 8
// bytes at words 2 g, 2 g + 1 (4-byte entries: word g); for IQ4 the codebook per byte of nibbles
// (common/iq4.wgsl). A storage binding, filled once per device (ops/quant_grid.py): constant arrays of
// 256 to 2048 64-bit entries indexed at run time would be copied into every invocation's private memory
// (naga spills a dynamically indexed value array to a function variable; Tint emits a per-invocation
// constant array) and compile slowly; a small table read through the cache costs a load per lookup.
@group(0) @binding(14) var<storage, read> QG: array<u32>;

// ggml's ksigns_iq2xs[s]: the 7-bit sign index s with its parity as bit 7 (so an even count of signs).
fn ksign(s: u32) -> u32 {
  return s | ((countOneBits(s) & 1u) << 7u);
}

// +1 or -1 for bits 0..3 of b (set: negative).
fn sgn4(b: u32) -> vec4<f32> {
  return 1.0 - 2.0 * vec4<f32>((vec4<u32>(b) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u));
}

// The 8 int8 of 8-byte grid entry g, element j negated where bit j of `signs` is set.
fn grid8(g: u32, signs: u32) -> array<vec4<f32>, 2> {
  return array<vec4<f32>, 2>(sbytes4(QG[2u * g]) * sgn4(signs), sbytes4(QG[2u * g + 1u]) * sgn4(signs >> 4u));
}

// The int8 bytes of w with byte j negated where bit j of s4 (4 bits) is set, as packed int8: for the
// integer-dot loaders (gemm_q8/iq*.wgsl). The IQ2/IQ3 grid bytes are 1..127: -v = ~v + 1 never
// carries into the next byte.
fn neg4(w: u32, s4: u32) -> u32 {
  let m = spread4(s4) * 0xFFu;                 // 0xFF in each negated byte
  return (w ^ m) + (m & 0x01010101u);
}

// The IQ1 grid values g (int8 -1, 0, 1, eight in w) as int8 8 g + 1 (off 7) or 8 g - 1 (off 9): the
// IQ1 loaders' integer form of g +- 1/8 (gemm_q8/iq1_*.wgsl). Bytewise, with no carries: g + 1 is 0..2.
fn iq1_q8(w: vec2<u32>, off: u32) -> vec2<u32> {
  let b = ((w ^ vec2<u32>(0x80808080u)) + vec2<u32>(0x01010101u)) ^ vec2<u32>(0x80808080u);
  return ((b << vec2<u32>(3u)) + vec2<u32>((128u - off) * 0x01010101u)) ^ vec2<u32>(0x80808080u);
}
