// Q8_0's block from its body words (gemm_mma/q32r.wgsl): the 32 int8, and d.
const QW: u32 = 9u;      // words that hold the 34 bytes
const NV: u32 = 3u;      // 16-byte words that hold it wherever it starts (34 bytes from up to 14 bytes in: 48)
const PAIRED: bool = true;   // in pairs on the GPU, the body 4-aligned (backends/wgpu/layout.py)

fn q32p(w: array<u32, QW - 1u>, d: f32) -> Q32 {
  return Q32(vec4<u32>(w[0], w[1], w[2], w[3]), vec4<u32>(w[4], w[5], w[6], w[7]), d, 0.0);
}
