// IQ4_XS pieces (136-byte blocks, 8-aligned: d f16, scales_h u16, scales_l[4], qs[128]): one 32-element
// sub-block per piece (8 per block, x grouped by 32 as q32's): its 16 bytes of qs (low nibbles: elements
// 0..15, high: 16..31) as two aligned 16-byte loads (the bytes sit at 8 mod 16 in every other block) and
// the block's 8-byte header, shared by its 8 lanes. Values: the signed codebook (common/iq4.wgsl) times
// d (ls - 32), ls the sub-block's 6-bit scale: no offset, so no x sum. The codebook is looked up in
// workgroup memory (gemv/table_true.wgsl, TABLE set for this piece).
const iq4_xs_QK: u32 = 256u;
const iq4_xs_QB: u32 = 136u;
const iq4_xs_PPB: u32 = 8u;
const iq4_xs_PX: u32 = 8u;

fn iq4_xs_gx(i: u32, j: u32) -> u32 { return 32u * i + 4u * j; }

// Sub-block i's 16 bytes of qs: branch-free over the two alignments (neighbouring blocks differ).
fn iq4_xs_qs(s: u32, blk: u32, i: u32) -> vec4<u32> {
  let b = blk + 8u + 16u * i;
  let a = wq(s, b >> 4u);
  let c = wq(s, (b >> 4u) + 1u);
  return select(a, vec4<u32>(a.zw, c.xy), (b & 8u) != 0u);
}

// d (ls - 32) of sub-block i.
fn iq4_xs_dl(s: u32, blk: u32, i: u32) -> f32 {
  let h = wd(s, blk >> 2u);
  let l = wd(s, (blk >> 2u) + 1u);
  let ls = ((l >> (4u * i)) & 0xFu) | (((h >> (16u + 2u * i)) & 3u) << 4u);
  return unpack2x16float(h).x * f32(i32(ls) - 32);
}

// The piece's codebook values as int8 for the float dots: lo (elements 0..15), hi (16..31).
fn iq4_xs_lohi(s: u32, blk: u32, i: u32) -> array<vec4<u32>, 2> {
  let q = iq4_xs_qs(s, blk, i);
  let a = iq4w_wg(q.x); let b = iq4w_wg(q.y); let c = iq4w_wg(q.z); let e = iq4w_wg(q.w);
  return array<vec4<u32>, 2>(vec4<u32>(a.x, b.x, c.x, e.x), vec4<u32>(a.y, b.y, c.y, e.y));
}

fn iq4_xs_gdot(s: u32, blk: u32, i: u32, xs: XS) -> f32 {
  let w = iq4_xs_lohi(s, blk, i);
  let lo = dot(sbytes4(w[0].x), xs[0]) + dot(sbytes4(w[0].y), xs[1]) +
           dot(sbytes4(w[0].z), xs[2]) + dot(sbytes4(w[0].w), xs[3]);
  let hi = dot(sbytes4(w[1].x), xs[4]) + dot(sbytes4(w[1].y), xs[5]) +
           dot(sbytes4(w[1].z), xs[6]) + dot(sbytes4(w[1].w), xs[7]);
  return iq4_xs_dl(s, blk, i) * (lo + hi);
}

// The integer dots' form: qs word k's values as iq4w_pq gives them (p[k], q[k]), dotted against x
// permuted to match (iq4_xperm), so the weights are not reordered into element order.
struct iq4_xs_W { p: vec4<u32>, q: vec4<u32>, d: f32 }

fn iq4_xs_wload(s: u32, blk: u32, i: u32) -> iq4_xs_W {
  let q = iq4_xs_qs(s, blk, i);
  let a = iq4w_pq(q.x); let b = iq4w_pq(q.y); let c = iq4w_pq(q.z); let e = iq4w_pq(q.w);
  return iq4_xs_W(vec4<u32>(a.x, b.x, c.x, e.x), vec4<u32>(a.y, b.y, c.y, e.y), iq4_xs_dl(s, blk, i));
}

// The multi-row GEMV's split of qdot: the piece decoded once (wload), reduced per x row (wdot).
fn iq4_xs_wdot(w: iq4_xs_W, xq: XQ) -> f32 {
  let x0 = iq4_xperm(xq.q[0], xq.q[4]); let x1 = iq4_xperm(xq.q[1], xq.q[5]);
  let x2 = iq4_xperm(xq.q[2], xq.q[6]); let x3 = iq4_xperm(xq.q[3], xq.q[7]);
  let t = idot(w.p.x, x0.x) + idot(w.q.x, x0.y) + idot(w.p.y, x1.x) + idot(w.q.y, x1.y) +
          idot(w.p.z, x2.x) + idot(w.q.z, x2.y) + idot(w.p.w, x3.x) + idot(w.q.w, x3.y);
  return w.d * xq.d * f32(t);
}

fn iq4_xs_qdot(s: u32, blk: u32, i: u32, xs: XS, xq: XQ) -> f32 {
  return iq4_xs_wdot(iq4_xs_wload(s, blk, i), xq);
}
