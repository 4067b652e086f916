// Helpers shared by the GEMV piece snippets (gemv/<piece>.wgsl), included once by gemv_q.wgsl.
//
// A piece snippet splits each weight block into PPB "pieces"; the GEMV gives consecutive lanes
// consecutive pieces (so a warp reads contiguous bytes) and each lane reduces its piece against the
// PX vec4s of x that `gx` names, for R rows at once (x is loaded once per piece, not once per row).
// Every name a piece file declares starts with its file name, so two pieces can share one module (a
// mixed-type matmul_multi runs weights of two types in one dispatch, one "slot" each):
//   const <p>_QK: u32, <p>_QB: u32       elements and bytes per block
//   const <p>_PPB: u32, <p>_PX: u32      pieces per block; x vec4s per piece (1, 2, 4 or 8)
//   fn <p>_gx(i: u32, j: u32) -> u32     element offset in the block of the j-th x vec4 of piece i
//   fn <p>_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32
//                                        dot of piece i of the block at byte `blk` of slot s's weights
//                                        with xs[0..PX)
//   fn <p>_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32   (pieces in Q8X_PIECES only)
//                                        the same dot with x as int8 (xq), by packed 4x8-bit integer dots
// Pieces read weights only through the slot loads below (wd, wq, lw1, lw2, lw4, h16), with the slot s
// they were given: s is a constant at every call, so the branch on it folds away.
// No loop in a piece indexes an array: pieces unroll by hand with `if (PX > n)` on constants. (On the
// H100 a dynamically indexed private array lives in local memory: 4-10x slower GEMVs, measured.)
// Slot 0 is W (array<u32>) and W4 (array<vec4<u32>>, the same bytes); slot 1 (MIXED only) is W1/W14
// (gemv/slot1_true.wgsl). 16-byte loads where the block layout is 16-aligned (F32, F16, Q4_K), word
// loads with a 2-byte funnel where it is not.

@group(0) @binding(6) var<storage, read> W4: array<vec4<u32>>;

const MAGIC: bool = {{MAGIC}};
const MIXED: bool = {{MIXED}};

#include "gemv/slot1_{{MIXED}}.wgsl"

// x values of one piece; slots PX.. are unused.
alias XS = array<vec4<f32>, 8>;

// Word i / vec4 i of slot s's weights.
fn wd(s: u32, i: u32) -> u32 {
  if (MIXED && s == 1u) { return wd1(i); }
  return W[i];
}

fn wq(s: u32, i: u32) -> vec4<u32> {
  if (MIXED && s == 1u) { return wq1(i); }
  return W4[i];
}

// Small unsigned ints (< 2^23) to f32 minus `off`. MAGIC builds 2^23 + v from the bits and subtracts
// exactly (an OR and a full-rate add) instead of the quarter-rate int->float conversion.
fn u2f(v: vec4<u32>, off: f32) -> vec4<f32> {
  if (MAGIC) { return bitcast<vec4<f32>>(v | vec4<u32>(0x4B000000u)) - (8388608.0 + off); }
  return vec4<f32>(v) - off;
}

// The four bytes of w, byte 0 first, minus `off` (w holds 4 packed small values, e.g. nibbles).
fn b2f(w: u32, off: f32) -> vec4<f32> {
  return u2f((vec4<u32>(w) >> vec4<u32>(0u, 8u, 16u, 24u)) & vec4<u32>(0xFFu), off);
}

fn hsum(v: vec4<f32>) -> f32 { return v.x + v.y + v.z + v.w; }

// x of one piece as int8 for the integer-dot GEMV (Q8X): q[j] packs xs[j] / d rounded (byte 0 = .x),
// one scale d = max |x| / 127 over the piece's PX vec4s (at most 32 values: the granularity of the
// q8_1 activations llama.cpp's CUDA GEMV multiplies). Computed once per piece, shared by its R rows;
// a row then reduces 4 products per dot4I8Packed instead of converting every weight to f32.
struct XQ { q: array<u32, 8>, d: f32 }

// 1.5 * 2^23 + v rounds v (|v| <= 127) to the nearest integer in the low mantissa bits, in two's
// complement in the low byte: no float-to-int conversion.
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

// Word loads at a 2-aligned byte address b (blocks of 18, 22, 34, 110, 210 bytes are only 2-aligned).
// Branch-free: neighbouring blocks differ in alignment, so a branch would diverge inside a warp.
fn lw1(s: u32, b: u32) -> u32 {
  let w = b >> 2u;
  let a = wd(s, w);
  return select(a, (a >> 16u) | (wd(s, w + 1u) << 16u), (b & 2u) != 0u);
}

fn lw2(s: u32, b: u32) -> vec2<u32> {
  let w = b >> 2u;
  let a = wd(s, w); let c = wd(s, w + 1u); let e = wd(s, w + 2u);
  return select(vec2<u32>(a, c), vec2<u32>((a >> 16u) | (c << 16u), (c >> 16u) | (e << 16u)), (b & 2u) != 0u);
}

fn lw4(s: u32, b: u32) -> vec4<u32> {
  let w = b >> 2u;
  let a = wd(s, w); let c = wd(s, w + 1u); let e = wd(s, w + 2u); let g = wd(s, w + 3u); let h = wd(s, w + 4u);
  return select(vec4<u32>(a, c, e, g),
                vec4<u32>((a >> 16u) | (c << 16u), (c >> 16u) | (e << 16u), (e >> 16u) | (g << 16u),
                          (g >> 16u) | (h << 16u)), (b & 2u) != 0u);
}

// The f16 at the 2-aligned byte b.
fn h16(s: u32, b: u32) -> f32 {
  return unpack2x16float(wd(s, b >> 2u) >> ((b & 2u) * 8u)).x;
}

// Q4_K / Q5_K: (d * scale, dmin * min) of sub-blocks 2j and 2j+1 (j < 4) from the 16-byte block header
// hdr = (d|dmin, scales[0..4], scales[4..8], scales[8..12]) (ggml get_scale_min_k4, two at a time).
fn kscales(hdr: vec4<u32>, j: u32) -> vec4<f32> {
  let sh = 16u * (j & 1u);
  let y = hdr.y >> sh; let z = hdr.z >> sh; let w = hdr.w >> sh;
  let hi = j >= 2u;
  let sc = select(y & 0x3F3Fu, (w & 0x0F0Fu) | ((y >> 2u) & 0x3030u), hi);
  let mn = select(z & 0x3F3Fu, ((w >> 4u) & 0x0F0Fu) | ((z >> 2u) & 0x3030u), hi);
  let dm = unpack2x16float(hdr.x);
  let f = u2f(vec4<u32>(sc, mn, sc >> 8u, mn >> 8u) & vec4<u32>(0xFFu), 0.0);
  return vec4<f32>(dm.x, dm.y, dm.x, dm.y) * f;
}

// Bits 0..3 of x moved to bit 0 of bytes 0..3 (the four shifted copies cannot overlap, so no carries).
fn spread4(x: u32) -> u32 {
  return (x * 0x00204081u) & 0x01010101u;
}
