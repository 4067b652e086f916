// Decode batches of up to 16 rows on the matrix units (ops/gemm.py ``mmv``): Y[m, n] = sum_k x[m, k] W[n, k]
// for Q4_K and Q6_K weights, without a workgroup tile over the weights. Each of the S subgroups owns 16
// weight rows and dequantizes their 128 k of a step to f16 (two weights an instruction: gemm_mmv/<type>.wgsl,
// ops/gemm.py half_dequant's rounding) into a slot of workgroup memory only it reads; x's 16 rows (f16 from
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

var<private> xr: array<vec4<u32>, XPL>;
var<private> w_slot: u32;

fn put(o: u32, v: vec4<u32>) { (*bufferView<array<vec4<u32>, SMH / 8u>>(&sm, 0))[o / 8u] = v; }

// The loader's 8 halves of row r (of the subgroup's 16), k kh.. of the step, into its slot.
fn put_w(r: u32, kh: u32, v: vec4<u32>) { put(w_slot + r * LDK + kh, v); }

// A word's two halves and back (gemm_mmv_stage.wgsl has naga's forms).
fn h2(u: u32) -> vec2<f16> { return bitcast<vec2<f16>>(u); }
fn w2(v: vec2<f16>) -> u32 { return bitcast<u32>(v); }

#include "gemm_mmv/{{WLOAD}}.wgsl"

// Step t's reads: lane e's weight unit (row n0 + e / 2: the loader's) and its share of x's 16 x 16 vec4
// (zeros past the live rows).
fn fetch(n0: u32, t: u32, e: u32, lid: u32) {
  ur = load_w(n0 + e / 2u, t, e);
  let mlim = min(D.m, P.n_tokens);
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    let m = w / 16u;
    xr[i] = vec4<u32>(0u);
    if (w < 256u && m < mlim) { xr[i] = XH[m * (D.k / 8u) + 16u * t + w % 16u]; }
  }
}

// Step t's staging: the unit's weights into the subgroup's slot, x into buffer t % 2.
fn stage(t: u32, e: u32, lid: u32) {
  stage_w(t, e);
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
  w_slot = slot;
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
    stage(t, e, lid);
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
