// x as int8 per group of at most 32 values (one scale each: the granularity of the q8_1 activations
// llama.cpp multiplies by integer dots), shared by the integer-dot GEMV (gemv/common.wgsl, one group
// per piece: gemv/<piece>.wgsl's qdot) and the prefill GEMM's x pass (gemm_xq.wgsl, 32 consecutive
// values). Numpy twins: ops/gemm.py q8_round, ops/matmul.py q8x_round.

// x values of one group (a GEMV piece: slots PX.. are unused).
alias XS = array<vec4<f32>, 8>;

// xquant's result: q[j] packs xs[j] / d rounded (byte 0 = .x), one scale d = max |x| / 127 over the
// group's n vec4s. In the GEMV it is computed once per piece and shared by the R rows; a row then
// reduces 4 products per dot4I8Packed instead of converting every weight to f32.
struct XQ { q: array<u32, 8>, d: f32 }

// 1.5 * 2^23 + v rounds v (|v| <= 127) to the nearest integer in the low mantissa bits, in two's
// complement in the low byte: no float-to-int conversion. Values within an ulp or two of a rounding tie
// may round either way: drivers may or may not contract this into a fused multiply-add (lavapipe does
// not), and division may be 2.5 ulp off.
fn q8pack(v: vec4<f32>, inv: f32) -> u32 {
  return pack4xI8(bitcast<vec4<i32>>(v * inv + 12582912.0));
}

fn xquant(xs: XS, n: u32) -> XQ {
  var a = abs(xs[0]);
  if (n > 1u) { a = max(a, abs(xs[1])); }
  if (n > 2u) { a = max(a, max(abs(xs[2]), abs(xs[3]))); }
  if (n > 4u) { a = max(max(a, max(abs(xs[4]), abs(xs[5]))), max(abs(xs[6]), abs(xs[7]))); }
  let m = max(max(a.x, a.y), max(a.z, a.w));
  let inv = select(0.0, 127.0 / m, m > 0.0);
  var r: XQ;
  r.d = m * (1.0 / 127.0);
  r.q[0] = q8pack(xs[0], inv);
  if (n > 1u) { r.q[1] = q8pack(xs[1], inv); }
  if (n > 2u) { r.q[2] = q8pack(xs[2], inv); r.q[3] = q8pack(xs[3], inv); }
  if (n > 4u) {
    r.q[4] = q8pack(xs[4], inv); r.q[5] = q8pack(xs[5], inv);
    r.q[6] = q8pack(xs[6], inv); r.q[7] = q8pack(xs[7], inv);
  }
  return r;
}

// The integer dot of the 4 bytes of w (as int8: unsigned pieces keep values < 128) with 4 int8 of x.
fn idot(w: u32, x: u32) -> i32 { return dot4I8Packed(w, x); }

// The sum of the int8 x in xq.q[j0 .. j0 + n) (n = 1, 2, 4 or 8; the same for every row, so the
// compiler computes it once per piece): offset-coded weights (q - 8, q - 32) subtract it times the offset.
fn xsum(xq: XQ, j0: u32, n: u32) -> i32 {
  var t = idot(0x01010101u, xq.q[j0]);
  if (n > 1u) { t += idot(0x01010101u, xq.q[j0 + 1u]); }
  if (n > 2u) { t += idot(0x01010101u, xq.q[j0 + 2u]) + idot(0x01010101u, xq.q[j0 + 3u]); }
  if (n > 4u) {
    t += idot(0x01010101u, xq.q[j0 + 4u]) + idot(0x01010101u, xq.q[j0 + 5u]) +
         idot(0x01010101u, xq.q[j0 + 6u]) + idot(0x01010101u, xq.q[j0 + 7u]);
  }
  return t;
}
