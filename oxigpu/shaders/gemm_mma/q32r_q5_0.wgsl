// Q5_0's block from its words (gemm_mma/q32r.wgsl; mid: gemm_mma/q32r_put.wgsl): d, the high bits qh at
// byte 2, 16 bytes of nibbles at byte 6; as gemm_q8/q5_0.wgsl.
const QW: u32 = 6u;      // words that hold the 22 bytes
const NV: u32 = 3u;      // 16-byte words that hold it wherever it starts (22 bytes from up to 14 bytes in: 36 > 32)

fn q32b(b: array<u32, QW>) -> Q32 {
  let qh = mid(b, 0u);
  let q = vec4<u32>(mid(b, 1u), mid(b, 2u), mid(b, 3u), mid(b, 4u));
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8((q & mask) | q5_0_high(qh & 0xFFFFu), 16u),
             s8(((q >> vec4<u32>(4u)) & mask) | q5_0_high(qh >> 16u), 16u), unpack2x16float(b[0]).x, 0.0);
}
