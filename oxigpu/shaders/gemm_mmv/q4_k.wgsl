// gemm_mmv.wgsl's Q4_K units (and gemm_mmv_stage.wgsl's, the lavapipe check). A lane's unit of step t: row
// e / 2 of its 16, sub-block pair p = 2 (t % 2) + e % 2 of block t / 2: the block's head and the pair's 32
// nibble bytes as three 16-byte words (Q4_K blocks and rows are 16-byte multiples), read a step ahead.
// Its 64 weights become halves as (q - 8) d sc + (8 d sc - dmin m) (gemm_mma/q4_kh.wgsl's rounding: the twin
// is ops/gemm.py half_dequant), two an instruction, in the k0 k2 k1 k3 order of each 4 that gemm_xh.wgsl's
// PERM4 gives x; the low nibbles' sub-block at k 64 (e % 2), the high ones' 32 further.
@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;   // the weights as 16-byte words

const QB: u32 = 144u;

struct U { h: vec4<u32>, a: vec4<u32>, b: vec4<u32> }
var<private> ur: U;

// The unit of row n, step t, lane e (zeros past the rows); stage_w reads it from ur.
fn load_w(n: u32, t: u32, e: u32) -> U {
  if (n >= D.rows) { return U(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u)); }
  let p = 2u * (t % 2u) + e % 2u;
  let base = (n * D.row_bytes + (t / 2u) * QB) / 16u;
  return U(W4[base], W4[base + 1u + 2u * p], W4[base + 2u + 2u * p]);
}

// The 4 weights of nibble word w as (q - 8) d + c in the order k0 k2 k1 k3: two words.
fn deq4(w: u32, d: vec2<f16>, c: vec2<f16>) -> vec2<u32> {
  let a = fma(h2((w & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  let b = fma(h2(((w >> 8u) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  return vec2<u32>(w2(a), w2(b));
}

fn stage_w(t: u32, e: u32) {
  // the pair's two 6-bit scales and mins side by side in 16 bits (get_scale_min_k4 on two bytes at once):
  // sub-blocks 0-3 keep theirs in scales[0..8], 4-7 split over scales[8..12] and the top bits of [0..8]
  let sh = 16u * (e % 2u);
  let y = ur.h.y >> sh;
  let z = ur.h.z >> sh;
  let w = ur.h.w >> sh;
  var sc = y & 0x3F3Fu;
  var mn = z & 0x3F3Fu;
  if (t % 2u == 1u) {
    sc = (w & 0x0F0Fu) | ((y >> 2u) & 0x3030u);
    mn = ((w >> 4u) & 0x0F0Fu) | ((z >> 2u) & 0x3030u);
  }
  let dm = unpack2x16float(ur.h.x);
  let f = dm.x * vec2<f32>(f32(sc & 0xFFu), f32(sc >> 8u));   // f32 products of f16 and 6-bit ints: exact
  let c = 8.0 * f - dm.y * vec2<f32>(f32(mn & 0xFFu), f32(mn >> 8u));
  let d0 = vec2<f16>(f16(f.x)); let c0 = vec2<f16>(f16(c.x));
  let d1 = vec2<f16>(f16(f.y)); let c1 = vec2<f16>(f16(c.y));
  let r = e / 2u;
  let k0 = 64u * (e % 2u);
  let wv = array<u32, 8>(ur.a.x, ur.a.y, ur.a.z, ur.a.w, ur.b.x, ur.b.y, ur.b.z, ur.b.w);
  for (var j = 0u; j < 4u; j++) {
    let l0 = deq4(wv[2u * j], d0, c0); let l1 = deq4(wv[2u * j + 1u], d0, c0);
    let h0 = deq4(wv[2u * j] >> 4u, d1, c1); let h1 = deq4(wv[2u * j + 1u] >> 4u, d1, c1);
    put_w(r, k0 + 8u * j, vec4<u32>(l0, l1));
    put_w(r, k0 + 32u + 8u * j, vec4<u32>(h0, h1));
  }
}
