// gemm_mmv.wgsl's Q6_K units (and gemm_mmv_stage.wgsl's). A step of 128 k is half a block (hn = t % 2: ql
// bytes 64 hn.., qh 32 hn.., scales 8 hn..); a lane's unit is row e / 2 of its 16 and l in 16 hp .. 16 hp + 16
// (hp = e % 2) of the half's 32, i.e. k = l + 32 g for g 0..3 (ggml's dequantize_row_q6_K): 16 bytes of ql
// at l and at l + 32, 16 of qh at l, its four scales and d, as words through W: the GPU holds Q6_K blocks in
// pairs with 4-aligned bodies and both d's in the word between them (backends/wgpu/layout.py).
// Weights become halves as (q - 32) s with s = d sc rounded to f16 (ops/gemm.py half_dequant), two an
// instruction, in the k0 k2 k1 k3 order of each 4 (gemm_xh.wgsl PERM4).
const QB: u32 = 210u;

struct U { a: vec4<u32>, a2: vec4<u32>, h: vec4<u32>, s: vec2<u32>, d: u32 }
var<private> ur: U;

fn ld4(w: u32) -> vec4<u32> { return vec4<u32>(W[w], W[w + 1u], W[w + 2u], W[w + 3u]); }

// The unit of row n, step t, lane e (zeros past the rows); stage_w reads it from ur.
fn load_w(n: u32, t: u32, e: u32) -> U {
  if (n >= D.rows) { return U(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u), vec2<u32>(0u), 0u); }
  let hn = t % 2u;
  let hp = e % 2u;
  let blk = n * D.row_bytes + (t / 2u) * QB;        // the block's byte in GGUF's layout
  let body = ((blk + 2u) & ~3u) / 4u;                // common/dequant.wgsl pair_body, as a word
  let dw = ((blk & ~3u) + select(QB - 2u, 0u, (blk & 2u) != 0u)) / 4u;   // ... pair_dword
  let sw = body + 48u + 2u * hn;                    // the half's 8 scale bytes
  return U(ld4(body + 16u * hn + 4u * hp), ld4(body + 16u * hn + 8u + 4u * hp), ld4(body + 32u + 8u * hn + 4u * hp),
           vec2<u32>(W[sw], W[sw + 1u]), (W[dw] >> ((blk & 2u) * 8u)) & 0xFFFFu);
}

// The 4 weights of 6-bit word q (a byte each) times s, in the order k0 k2 k1 k3: two words.
fn deq4(q: u32, s: vec2<f16>) -> vec2<u32> {
  let a = (h2((q & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  let b = (h2(((q >> 8u) & 0x00FF00FFu) | 0x64006400u) - vec2<f16>(1056.0)) * s;
  return vec2<u32>(w2(a), w2(b));
}

fn stage_w(t: u32, e: u32) {
  let hp = e % 2u;
  let d = unpack2x16float(ur.d).x;
  let r = e / 2u;
  let k0 = 16u * hp;
  for (var g = 0u; g < 4u; g++) {
    let i = hp + 2u * g;                      // the scale of l / 16 = hp in group g: byte i of the half's 8
    let sc = extractBits(bitcast<i32>(ur.s[i / 4u]), 8u * (i % 4u), 8u);
    let s = vec2<f16>(f16(d * f32(sc)));
    let src = select(ur.a, ur.a2, g % 2u == 1u);
    var q: vec4<u32>;
    for (var j = 0u; j < 4u; j++) {
      let lo = (src[j] >> (4u * (g / 2u))) & 0x0F0F0F0Fu;
      let hi = ((ur.h[j] >> (2u * g)) << 4u) & 0x30303030u;
      q[j] = lo | hi;
    }
    put_w(r, k0 + 32u * g, vec4<u32>(deq4(q.x, s), deq4(q.y, s)));
    put_w(r, k0 + 32u * g + 8u, vec4<u32>(deq4(q.z, s), deq4(q.w, s)));
  }
}
