// Q5_0's block from its body words (gemm_mma/q32r.wgsl): the high bits qh, 16 bytes of nibbles, and d; as
// gemm_q8/q5_0.wgsl.
const QW: u32 = 6u;      // words that hold the 22 bytes
const NV: u32 = 3u;      // 16-byte words that hold it wherever it starts (22 bytes from up to 14 bytes in: 36 > 32)
const PAIRED: bool = true;   // in pairs on the GPU, the body 4-aligned (backends/wgpu/layout.py)

fn q32p(w: array<u32, QW - 1u>, d: f32) -> Q32 {
  let qh = w[0];
  let q = vec4<u32>(w[1], w[2], w[3], w[4]);
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8((q & mask) | q5_0_high(qh & 0xFFFFu), 16u),
             s8(((q >> vec4<u32>(4u)) & mask) | q5_0_high(qh >> 16u), 16u), d, 0.0);
}
