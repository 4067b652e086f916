// Q4_0's block from its words (gemm_mma/q32r.wgsl; mid: gemm_mma/q32r_put.wgsl): d, then 16 bytes of
// nibbles at byte 2 (low: elements 0..15, high: 16..31), minus 8.
const QW: u32 = 5u;      // words that hold the 18 bytes
const NV: u32 = 2u;      // 16-byte words that hold it wherever it starts (18 bytes from up to 14 bytes in: 32)

fn q32b(b: array<u32, QW>) -> Q32 {
  let q = vec4<u32>(mid(b, 0u), mid(b, 1u), mid(b, 2u), mid(b, 3u));
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8(q & mask, 8u), s8((q >> vec4<u32>(4u)) & mask, 8u), unpack2x16float(b[0]).x, 0.0);
}
