// TQ1_0: 256 elements in 54 bytes: qs[48], qh[4], d f16. Each byte packs 5 (qh: 4) base-3 digits as a
// fraction of 243 scaled to 256: digit j of byte b is ((b * 3^j mod 256) * 3) >> 8. Elements 0..159: digit
// e / 32 of qs[e % 32]; 160..239: digit (e - 160) / 16 of qs[32 + e % 16]; 240..255: digit (e - 240) / 4
// of qh[e % 4]. x = d * (digit - 1).
#include "common/dequant.wgsl"
const QK: u32 = 256u;
const QB: u32 = 54u;

// Digit j of each byte of w (the four bytes at once): 3^j times the bytes, mod 256 each, times 3, / 256.
fn tq1_digits(w: u32, j: u32) -> vec4<f32> {
  let p = select(select(1u, 3u, j == 1u), select(select(9u, 27u, j == 3u), 81u, j == 4u), j >= 2u);
  return vec4<f32>((((bytes4(w) * p) & vec4<u32>(0xFFu)) * 3u) >> vec4<u32>(8u)) - 1.0;
}

fn dq8(blk: u32, c: u32) -> V8 {
  let d = f16at(blk + 52u);
  if (c < 20u) {
    let q = blk + 8u * (c & 3u);
    return V8(d * tq1_digits(ld32(q), c >> 2u), d * tq1_digits(ld32(q + 4u), c >> 2u));
  }
  if (c < 30u) {
    let q = blk + 32u + 8u * ((c - 20u) & 1u);
    return V8(d * tq1_digits(ld32(q), (c - 20u) >> 1u), d * tq1_digits(ld32(q + 4u), (c - 20u) >> 1u));
  }
  let h = ld32(blk + 48u);
  let j = 2u * (c - 30u);
  return V8(d * tq1_digits(h, j), d * tq1_digits(h, j + 1u));
}
