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
// Pieces read weights only through the slot loads below (wd, wq, lwa, pair_h16), with the slot s they
// were given: s is a constant at every call, so the branch on it folds away.
// No loop in a piece indexes an array: pieces unroll by hand with `if (PX > n)` on constants (NVIDIA's
// compiler puts a dynamically indexed private array in local memory: several times slower GEMVs).
// Slot 0 is W (array<u32>) and W4 (array<vec4<u32>>, the same bytes); slot 1 (MIXED only) is W1/W14
// (gemv/slot1_true.wgsl). 16-byte loads where the block layout is 16-aligned (F32, F16, Q4_K), word
// loads where it is 4-aligned (the paired types' bodies: common/dequant.wgsl pair_body); types without a
// piece file read through their dequant or GEMM snippets (gemv/dq8.wgsl, gemv/q32.wgsl).

@group(0) @binding(6) var<storage, read> W4: array<vec4<u32>>;

const MAGIC: bool = {{MAGIC}};
const MIXED: bool = {{MIXED}};

#include "gemv/slot1_{{MIXED}}.wgsl"
#include "common/q8.wgsl"
#include "common/dequant.wgsl"

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

// The word at the 4-aligned byte b.
fn lwa(s: u32, b: u32) -> u32 { return wd(s, b >> 2u); }

// A paired type's d (backends/wgpu/layout.py; common/dequant.wgsl pair_dword) of the block at GGUF's byte blk.
fn pair_h16(s: u32, blk: u32, qb: u32) -> f32 {
  return unpack2x16float(wd(s, pair_dword(blk, qb)) >> ((blk & 2u) * 8u)).x;
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
