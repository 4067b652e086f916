// Byte-addressed loads from the raw GGUF weight bytes, shared by every quant snippet.
// The including kernel declares `W: array<u32>` (the weight binding). GGUF blocks are not always
// word-aligned (TQ1_0, TQ2_0; Q8_0, Q5_0, Q4_0, IQ4_NL, Q6_K and Q3_K are word-aligned in pairs: pair_body
// below), so every load takes a byte offset into W.
//
// The interface of every `quant/<type>.wgsl` snippet (used by GEMV, GEMM and the embedding gather):
//   const QK: u32            elements per block (8 for F32/F16/BF16: a virtual block of 8 elements)
//   const QB: u32            bytes per block
//   fn dq8(blk: u32, c: u32) -> V8
//                            elements 8c .. 8c+7 of the block starting at byte `blk` of W, c < QK / 8
// Element e of a row starting at byte `row` is chunk (e % QK) / 8 of block row + (e / QK) * QB.

// Eight consecutive dequantized elements of a row (the unit every quant snippet produces).
struct V8 { a: vec4<f32>, b: vec4<f32> }

fn ld8(b: u32) -> u32 {
  return (W[b >> 2u] >> ((b & 3u) * 8u)) & 0xFFu;
}

fn ld32(b: u32) -> u32 {
  let s = (b & 3u) * 8u;
  let lo = W[b >> 2u];
  if (s == 0u) { return lo; }
  return (lo >> s) | (W[(b >> 2u) + 1u] << (32u - s));
}

fn ld16(b: u32) -> u32 {
  let s = (b & 3u) * 8u;
  if (s <= 16u) { return (W[b >> 2u] >> s) & 0xFFFFu; }
  return ld32(b) & 0xFFFFu;
}

fn f16at(b: u32) -> f32 {
  return unpack2x16float(ld16(b)).x;
}

// Blocks of 2-aligned sizes (Q6_K, Q3_K, Q8_0, Q5_0, Q4_0, IQ4_NL) sit in pairs on the GPU, [body 0][d 0][d 1][body 1]
// (backends/wgpu/layout.py; body: the block less its f16 d): each block keeps GGUF's bytes blk .. blk + qb,
// its body 4-aligned at pair_body(blk), both d's in one word, pair_dword(blk, qb) (the upper half for odd
// blocks, blk & 2).
fn pair_body(blk: u32) -> u32 { return (blk + 2u) & ~3u; }

fn pair_dword(blk: u32, qb: u32) -> u32 { return ((blk & ~3u) + select(qb - 2u, 0u, (blk & 2u) != 0u)) >> 2u; }

fn pair_d(blk: u32, qb: u32) -> f32 { return unpack2x16float(W[pair_dword(blk, qb)] >> ((blk & 2u) * 8u)).x; }

// The four bytes of q as unsigned ints, byte 0 first.
fn bytes4(q: u32) -> vec4<u32> {
  return (vec4<u32>(q) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu);
}

// The four bytes of q as signed int8 values, byte 0 first.
fn sbytes4(q: u32) -> vec4<f32> {
  return vec4<f32>((vec4<i32>(bitcast<i32>(q)) << vec4<u32>(24u, 16u, 8u, 0u)) >> vec4<u32>(24u));
}

// Nibbles (shift 0 or 4) of the 8 bytes q0, q1 as two vec4<u32>.
fn nib8(q0: u32, q1: u32, shift: u32) -> array<vec4<u32>, 2> {
  return array<vec4<u32>, 2>((bytes4(q0) >> vec4<u32>(shift)) & vec4<u32>(0xFu),
                             (bytes4(q1) >> vec4<u32>(shift)) & vec4<u32>(0xFu));
}

// Bit `bit` of each of the 8 bytes q0, q1, as 0/1.
fn bit8(q0: u32, q1: u32, bit: u32) -> array<vec4<u32>, 2> {
  return array<vec4<u32>, 2>((bytes4(q0) >> vec4<u32>(bit)) & vec4<u32>(1u),
                             (bytes4(q1) >> vec4<u32>(bit)) & vec4<u32>(1u));
}

// The 6-bit (scale, min) pair `j` of the 12 packed bytes at sb (Q4_K, Q5_K: ggml get_scale_min_k4).
fn scale_min_k4(sb: u32, j: u32) -> vec2<f32> {
  if (j < 4u) {
    return vec2<f32>(f32(ld8(sb + j) & 63u), f32(ld8(sb + j + 4u) & 63u));
  }
  let hi = ld8(sb + j + 4u);
  return vec2<f32>(f32((hi & 0xFu) | ((ld8(sb + j - 4u) >> 6u) << 4u)),
                   f32((hi >> 4u) | ((ld8(sb + j) >> 6u) << 4u)));
}

// The 5-bit values of chunk c of a Q5 block whose qh word is at hb and nibbles at qs.
fn q5_chunk(hb: u32, qs: u32, c: u32) -> array<vec4<f32>, 2> {
  let q = qs + (c & 1u) * 8u;
  let n = nib8(ld32(q), ld32(q + 4u), (c >> 1u) * 4u);
  let h = ld32(hb) >> (c * 8u);
  let h0 = ((vec4<u32>(h) >> vec4<u32>(0u, 1u, 2u, 3u)) & vec4<u32>(1u)) << vec4<u32>(4u);
  let h1 = ((vec4<u32>(h) >> vec4<u32>(4u, 5u, 6u, 7u)) & vec4<u32>(1u)) << vec4<u32>(4u);
  return array<vec4<f32>, 2>(vec4<f32>(n[0] | h0), vec4<f32>(n[1] | h1));
}

// Bits 0..3 of x moved to bit 0 of bytes 0..3 (the four shifted copies cannot overlap, so no carries).
fn spread4(x: u32) -> u32 {
  return (x * 0x00204081u) & 0x01010101u;
}
