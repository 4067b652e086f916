// Q8_0's block from its words (gemm_mma/q32r.wgsl; mid: gemm_mma/q32r_put.wgsl): d, then the 32 int8 at byte 2.
const QW: u32 = 9u;      // words that hold the 34 bytes
const NV: u32 = 3u;      // 16-byte words that hold it wherever it starts (34 bytes from up to 14 bytes in: 48)

fn q32b(b: array<u32, QW>) -> Q32 {
  return Q32(vec4<u32>(mid(b, 0u), mid(b, 1u), mid(b, 2u), mid(b, 3u)),
             vec4<u32>(mid(b, 4u), mid(b, 5u), mid(b, 6u), mid(b, 7u)), unpack2x16float(b[0]).x, 0.0);
}
