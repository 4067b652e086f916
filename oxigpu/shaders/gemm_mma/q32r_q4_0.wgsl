// Q4_0's block from its body words (gemm_mma/q32r.wgsl): 16 bytes of nibbles (low: elements 0..15, high:
// 16..31), minus 8, and d.
const QW: u32 = 5u;      // words that hold the 18 bytes
const NV: u32 = 2u;      // 16-byte words that hold it wherever it starts (18 bytes from up to 14 bytes in: 32)
const PAIRED: bool = true;   // in pairs on the GPU, the body 4-aligned (backends/wgpu/layout.py)

fn q32p(w: array<u32, QW - 1u>, d: f32) -> Q32 {
  let q = vec4<u32>(w[0], w[1], w[2], w[3]);
  let mask = vec4<u32>(0x0F0F0F0Fu);
  return Q32(s8(q & mask, 8u), s8((q >> vec4<u32>(4u)) & mask, 8u), d, 0.0);
}
