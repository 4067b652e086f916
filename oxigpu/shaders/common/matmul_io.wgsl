// Bindings and shape uniform shared by the GEMV and GEMM kernels (y = x @ W.T + bias (+ res)).
// W is bound per row chunk when the weight exceeds the storage-binding limit: `rows` rows starting at
// output column `col0`; row r of the chunk starts at byte r * row_bytes of the W binding.
// Multi-output matmuls (matmul_multi) bind several weights of one type stored back to back as one W:
// its output columns fall into NSEG segments, segment s ending at column seg_end[s] and written to its
// own output, at element seg_y[s] of the Y binding (which spans all the outputs).
struct Dims {
  k: u32,          // inner dimension (multiple of 8)
  n: u32,          // output columns over all segments
  rows: u32,       // weight rows in this chunk
  col0: u32,       // output column of the chunk's first row
  row_bytes: u32,  // bytes per weight row
  m: u32,          // rows of x / Y
  _p0: u32, _p1: u32,
  seg_end: vec4<u32>,
  seg_y: vec4<u32>,
}
@group(0) @binding(1) var<uniform> D: Dims;
@group(0) @binding(2) var<storage, read> X: array<vec4<f32>>;
@group(0) @binding(3) var<storage, read> W: array<u32>;
@group(0) @binding(4) var<storage, read> B: array<f32>;
@group(0) @binding(5) var<storage, read_write> Y: array<f32>;
@group(0) @binding(7) var<storage, read> RES: array<f32>;

const HAS_BIAS: bool = {{HAS_BIAS}};
const HAS_RES: bool = {{HAS_RES}};   // matmul_add: y += res[m, col] (one segment only)
const NSEG: u32 = {{NSEG}}u;

fn bias_at(col: u32) -> f32 {
  if (HAS_BIAS) { return B[col]; }
  return 0.0;
}

// Stores row m, column col (over all segments) of the product: bias and residual added here.
// The segment's fields by selects, not by a dynamic index into the uniform vectors: the index cost every
// stored element of the matrix-unit GEMM's epilogue far more than the selects (docs/perf-log.md).
fn store(m: u32, col: u32, v: f32) {
  var start = 0u;
  var end = D.seg_end.x;
  var y0 = D.seg_y.x;
  if (NSEG > 1u && col >= D.seg_end.x) { start = D.seg_end.x; end = D.seg_end.y; y0 = D.seg_y.y; }
  if (NSEG > 2u && col >= D.seg_end.y) { start = D.seg_end.y; end = D.seg_end.z; y0 = D.seg_y.z; }
  if (NSEG > 3u && col >= D.seg_end.z) { start = D.seg_end.z; end = D.seg_end.w; y0 = D.seg_y.w; }
  let i = y0 + m * (end - start) + col - start;
  var y = v + bias_at(col);
  if (HAS_RES) { y += RES[i]; }
  Y[i] = y;
}
