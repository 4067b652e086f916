// Decode batches of up to 16 rows on the matrix units (ops/gemm.py ``mmv``): Y[m, n] = sum_k x[m, k] W[n, k]
// for Q4_K weights, without a workgroup tile over the weights. Each of the S subgroups owns 16 weight rows
// and dequantizes their 128 k of a step to f16 (two weights an instruction: gemm_mma/q4_kh.wgsl's rounding,
// ops/gemm.py half_dequant) into a slot of workgroup memory only it reads; x's 16 rows of the step (f16 from
// gemm_xh.wgsl, each 4 k stored as k0 k2 k1 k3: the order the nibble words give) are staged once for the
// whole workgroup, double-buffered. A step is one barrier and 8 products of 16 x 16 x 16 a subgroup.
// Against gemm_mma.wgsl's 32 x 64 tiles (half their rows padding at 16 rows, a barrier pair every 64 k) and
// the multi-row GEMV (16 integer-dot sums a weight), it leaves the weights' bytes as the bound: x staged
// per subgroup instead made x's reads 3x the weights' (docs/perf-log.md, eighteenth session).
// Split-k (SPLITS > 1, and always for the GLU: gemm_reduce.wgsl pairs the gate and up sums): workgroup z
// covers steps [z SPT, (z + 1) SPT) and writes partial sums. x rows at or past min(D.m, n_tokens) read as
// zero; their outputs are not written.
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
requires buffer_view;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"

const QB: u32 = 144u;             // bytes of a Q4_K block (d, dmin, 12 scale bytes, 128 nibble bytes)
const S: u32 = {{S}}u;           // subgroups (of 32 lanes: gemm.py takes this kernel only there)
const SPLITS: u32 = {{SPLITS}}u;
const PARTIAL: bool = {{PARTIAL}};
const BN: u32 = 16u * S;          // weight rows a workgroup
const LDK: u32 = 136u;            // halves per staged row: a step's 128 k and 8 of padding (spreads banks)
const SLOT: u32 = 16u * LDK;      // a subgroup's weight slot (later its 16 x 16 f32 results)
const XB: u32 = S * SLOT;         // the first of the two x buffers
const SMH: u32 = XB + 2u * SLOT;  // halves of workgroup memory
const XPL: u32 = (256u + 32u * S - 1u) / (32u * S);   // x vec4s a lane stages per step (16 rows x 16)
var<workgroup> sm: buffer<{{SMB}}>;

@group(0) @binding(6) var<storage, read> XH: array<vec4<u32>>;   // x in f16, [m][k / 8]
@group(0) @binding(12) var<storage, read> W4: array<vec4<u32>>;  // the weights as 16-byte words

// A lane's unit of a step: its row's block head and the 32 nibble bytes of one sub-block pair.
struct U { h: vec4<u32>, a: vec4<u32>, b: vec4<u32> }
var<private> ur: U;
var<private> xr: array<vec4<u32>, XPL>;

fn put(o: u32, v: vec4<u32>) { (*bufferView<array<vec4<u32>, SMH / 8u>>(&sm, 0))[o / 8u] = v; }

fn sbyte(h: vec4<u32>, b: u32) -> u32 { return (h[1u + (b >> 2u)] >> (8u * (b & 3u))) & 0xFFu; }

// f16 of d sc and 8 d sc - dmin m of 32-block j (as gemm_mma/q4_kh.wgsl).
fn scales(h: vec4<u32>, j: u32) -> vec2<f16> {
  var s = vec2<u32>(sbyte(h, j) & 63u, sbyte(h, j + 4u) & 63u);
  if (j >= 4u) {
    let hi = sbyte(h, j + 4u);
    s = vec2<u32>((hi & 0xFu) | ((sbyte(h, j - 4u) >> 6u) << 4u), (hi >> 4u) | ((sbyte(h, j) >> 6u) << 4u));
  }
  let f = unpack2x16float(h.x) * vec2<f32>(s);
  return vec2<f16>(f16(f.x), f16(8.0 * f.x - f.y));
}

// The 4 weights of nibble word w as (q - 8) d + c in the order k0 k2 k1 k3: two words.
fn deq(w: u32, d: vec2<f16>, c: vec2<f16>) -> vec2<u32> {
  let a = fma(bitcast<vec2<f16>>((w & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  let b = fma(bitcast<vec2<f16>>(((w >> 8u) & 0x000F000Fu) | 0x64006400u) - vec2<f16>(1032.0), d, c);
  return vec2<u32>(bitcast<u32>(a), bitcast<u32>(b));
}

// Step t's reads: lane e's unit (row n0 + e / 2, pair 2 (t % 2) + e % 2 of block t / 2; zeros past the
// chunk's rows) and its share of x's 16 x 16 vec4 (zeros past the live rows).
fn fetch(n0: u32, t: u32, e: u32, lid: u32) {
  let n = n0 + e / 2u;
  let p = 2u * (t % 2u) + e % 2u;
  ur = U(vec4<u32>(0u), vec4<u32>(0u), vec4<u32>(0u));
  if (n < D.rows) {
    let base = (n * D.row_bytes + (t / 2u) * QB) / 16u;
    ur = U(W4[base], W4[base + 1u + 2u * p], W4[base + 2u + 2u * p]);
  }
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    let m = w / 16u;
    xr[i] = vec4<u32>(0u);
    if (w < 256u && m < mlim) { xr[i] = XH[m * (D.k / 8u) + 16u * t + w % 16u]; }
  }
}

// Step t's staging: the unit's 64 weights into the subgroup's slot (row e / 2, k 64 (e % 2) ..: the low
// nibbles' sub-block, then the high ones'), x into buffer t % 2.
fn stage(slot: u32, t: u32, e: u32, lid: u32) {
  let p = 2u * (t % 2u) + e % 2u;
  let s0 = scales(ur.h, 2u * p);
  let s1 = scales(ur.h, 2u * p + 1u);
  let d0 = vec2<f16>(s0.x); let c0 = vec2<f16>(s0.y);
  let d1 = vec2<f16>(s1.x); let c1 = vec2<f16>(s1.y);
  let o = slot + (e / 2u) * LDK + 64u * (e % 2u);
  let wv = array<u32, 8>(ur.a.x, ur.a.y, ur.a.z, ur.a.w, ur.b.x, ur.b.y, ur.b.z, ur.b.w);
  for (var j = 0u; j < 4u; j++) {
    let l0 = deq(wv[2u * j], d0, c0); let l1 = deq(wv[2u * j + 1u], d0, c0);
    let h0 = deq(wv[2u * j] >> 4u, d1, c1); let h1 = deq(wv[2u * j + 1u] >> 4u, d1, c1);
    put(o + 8u * j, vec4<u32>(l0, l1));
    put(o + 32u + 8u * j, vec4<u32>(h0, h1));
  }
  let xo = XB + (t % 2u) * SLOT;
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    if (w < 256u) { put(xo + (w / 16u) * LDK + 8u * (w % 16u), xr[i]); }
  }
}

@compute @workgroup_size(32 * S)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let sg = lid / 32u;
  let e = lid % 32u;
  let n0 = wid.x * BN + 16u * sg;
  let slot = sg * SLOT;
  let nst = D.k / 128u;
  let spt = (nst + SPLITS - 1u) / SPLITS;
  let t0 = min(wid.z * spt, nst);
  let t1 = min(t0 + spt, nst);
  var c: subgroup_matrix_result<f32, 16, 16>;
  if (t0 < t1) { fetch(n0, t0, e, lid); }
  // One barrier a step: x's buffer t % 2 was last read in step t - 2, before every subgroup passed step
  // t - 1's barrier; a subgroup's own slot was last read by its own products of step t - 1, which issued
  // (their fragments loaded) before its stores of step t issue.
  for (var t = t0; t < t1; t++) {
    stage(slot, t, e, lid);
    workgroupBarrier();
    if (t + 1u < t1) { fetch(n0, t + 1u, e, lid); }
    let xo = XB + (t % 2u) * SLOT;
    for (var kk = 0u; kk < 128u; kk += 16u) {
      let a = subgroupMatrixLoad<subgroup_matrix_left<f16, 16, 16>>(bufferView<array<f16, SMH>>(&sm, 0), xo + kk,
                                                                    false, LDK);
      let b = subgroupMatrixLoad<subgroup_matrix_right<f16, 16, 16>>(bufferView<array<f16, SMH>>(&sm, 0),
                                                                     slot + kk, true, LDK);
      c = subgroupMatrixMultiplyAccumulate(a, b, c);
    }
  }
  workgroupBarrier();   // every slot's last products done: the slots take the results
  subgroupMatrixStore(bufferView<array<f32, SMH / 2u>>(&sm, 0), slot / 2u, c, false, 16u);
  workgroupBarrier();
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < 8u; i++) {
    let q = e + 32u * i;            // element q of the 16 x 16 block: row q / 16, column q % 16
    let m = q / 16u;
    let n = n0 + q % 16u;
    if (m < mlim && n < D.rows) {
      let v = (*bufferView<array<f32, SMH / 2u>>(&sm, 0))[slot / 2u + q];
      if (PARTIAL) {
        Y[(wid.z * D.m + m) * D.rows + n] = v;
      } else {
        store(m, D.col0 + n, v);
      }
    }
  }
}
