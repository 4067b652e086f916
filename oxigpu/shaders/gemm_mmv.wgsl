// Decode batches of up to 16 rows on the matrix units (ops/gemm.py ``mmv``): Y[m, n] = sum_k x[m, k] W[n, k]
// for Q4_K and Q6_K weights, without a workgroup tile over the weights. Each of the S subgroups owns 16
// weight rows and dequantizes their 128 k of a step to f16 (two weights an instruction: gemm_mmv/<type>.wgsl,
// ops/gemm.py half_dequant's rounding) into a slot of workgroup memory only it reads; x's 16 rows (in f16,
// each 4 k stored as k0 k2 k1 k3: the order the nibble words give; gemm_mmv/x_<XSRC>.wgsl: rounded here from
// f32, or gemm_xh.wgsl's where a norm prologue ran there) are staged once for the whole workgroup,
// double-buffered. A step is one barrier and 8 products of 16 x 16 x 16 a subgroup.
// Against gemm_mma.wgsl's 32 x 64 tiles (half their rows padding at 16 rows, a barrier pair every 64 k) and
// the multi-row GEMV (16 integer-dot sums a weight) it takes less time; x staged per subgroup
// instead made x's reads 3x the weights' (docs/perf-log.md, eighteenth session). What bounds it is the
// step's barrier, not the weights' bytes (nineteenth session).
// Split-k (SPLITS > 1): workgroup z covers steps [z SPT, (z + 1) SPT) and writes its partial sums to PS; the
// workgroup that brings its column's counter to SPLITS sums every split's partials in z order (as the
// reduction pass gemm_reduce.wgsl would: the same bits), stores the outputs and resets the counter (as the
// attention's merge, attention_decode.wgsl; the counters start zeroed). No second dispatch.
// GLU (matmul_glu: D.n gate rows, then the D.n up rows): subgroups 0 .. S/2 - 1 take gate rows, the others
// the matching up rows, so a workgroup holds both sums of its 8 S outputs and stores ACT(gate) * up.
// x rows at or past min(D.m, n_tokens) read as zero; their outputs are not written.
diagnostic(off, chromium.subgroup_matrix_uniformity);
enable f16;
enable chromium_experimental_subgroup_matrix;
requires buffer_view;
#include "common/params.wgsl"
#include "common/matmul_io.wgsl"
#include "math.wgsl"

const S: u32 = {{S}}u;           // subgroups (of 32 lanes: gemm.py takes this kernel only there)
const SPLITS: u32 = {{SPLITS}}u;
const GLU: bool = {{GLU}};
const BN: u32 = 16u * S;          // weight rows a workgroup
const LDK: u32 = 136u;            // halves per staged row: a step's 128 k and 8 of padding (spreads banks)
const SLOT: u32 = 16u * LDK;      // a subgroup's weight slot (later its 16 x 16 f32 results)
const XB: u32 = S * SLOT;         // the first of the two x buffers
const SMH: u32 = XB + 2u * SLOT;  // halves of the slots and x buffers
const FLAG: u32 = SMH / 2u;        // the u32 after them: the split count this workgroup brought (SMB has room)
const XPL: u32 = (256u + 32u * S - 1u) / (32u * S);   // x vec4s a lane stages per step (16 rows x 16)
// The only workgroup variable: a second one beside a buffer moved the buffer views' offsets by a word on an
// NVIDIA GPU (Dawn, Vulkan), so the split count lives in it too (FLAG).
var<workgroup> sm: buffer<{{SMB}}>;

// Split-k partials [z][m][rows] as f32 bits, stored and loaded atomically: the summing workgroup reads other
// workgroups' stores at the device's coherence point, without an acquire barrier (none may follow its
// non-uniform exit).
@group(0) @binding(13) var<storage, read_write> PS: array<atomic<u32>>;
@group(0) @binding(14) var<storage, read_write> CNT: array<atomic<u32>>;   // splits done, per column

var<private> w_slot: u32;

fn act(v: f32) -> f32 { return {{ACT}}(v); }

fn put(o: u32, v: vec4<u32>) { (*bufferView<array<vec4<u32>, SMH / 8u>>(&sm, 0))[o / 8u] = v; }

// The loader's 8 halves of row r (of the subgroup's 16), k kh.. of the step, into its slot.
fn put_w(r: u32, kh: u32, v: vec4<u32>) { put(w_slot + r * LDK + kh, v); }

// A word's two halves and back (gemm_mmv_stage.wgsl has naga's forms).
fn h2(u: u32) -> vec2<f16> { return bitcast<vec2<f16>>(u); }
fn w2(v: vec2<f16>) -> u32 { return bitcast<u32>(v); }

#include "gemm_mmv/{{WLOAD}}.wgsl"
#include "gemm_mmv/x_{{XSRC}}.wgsl"

// Step t's reads: lane e's weight unit (row n, the loader's; D.rows for none: zeros) and its share of x.
fn fetch(n: u32, t: u32, e: u32, lid: u32) {
  ur = load_w(n, t, e);
  fetch_x(t, lid);
}

// Step t's staging: the unit's weights into the subgroup's slot, x's 16 x 16 words into buffer t % 2.
fn stage(t: u32, e: u32, lid: u32) {
  stage_w(t, e);
  let xo = XB + (t % 2u) * SLOT;
  for (var i = 0u; i < XPL; i++) {
    let w = lid + 32u * S * i;
    if (w < 256u) { put(xo + (w / 16u) * LDK + 8u * (w % 16u), x_word(i)); }
  }
}

// Element q of subgroup g's 16 x 16 results (row q / 16, column q % 16), after they are stored.
fn result(g: u32, q: u32) -> f32 { return (*bufferView<array<f32, SMH / 2u>>(&sm, 0))[g * SLOT / 2u + q]; }

// Output (m, column n of weight row range [0, D.rows)) summed over the splits in z order, or this
// workgroup's own where unsplit.
fn total(g: u32, q: u32, m: u32, n: u32) -> f32 {
  if (SPLITS == 1u) { return result(g, q); }
  var v = 0.0;
  for (var z = 0u; z < SPLITS; z++) { v += bitcast<f32>(atomicLoad(&PS[(z * D.m + m) * D.rows + n])); }
  return v;
}

@compute @workgroup_size(32 * S)
fn main(@builtin(local_invocation_index) lid: u32, @builtin(workgroup_id) wid: vec3<u32>) {
  let sg = lid / 32u;
  let e = lid % 32u;
  // the subgroup's first weight row; under the GLU a gate row block or its up rows D.n further
  var n0 = wid.x * BN + 16u * sg;
  var nlim = D.rows;
  if (GLU) {
    n0 = wid.x * (BN / 2u) + 16u * (sg % (S / 2u));
    nlim = D.n;
    if (sg >= S / 2u) { n0 += D.n; nlim = D.rows; }
  }
  let slot = sg * SLOT;
  w_slot = slot;
  let nw = select(D.rows, n0 + e / 2u, n0 + e / 2u < nlim);   // the lane's weight row (D.rows: none)
  let nst = D.k / 128u;
  let spt = (nst + SPLITS - 1u) / SPLITS;
  let t0 = min(wid.z * spt, nst);
  let t1 = min(t0 + spt, nst);
  var c: subgroup_matrix_result<f32, 16, 16>;
  if (t0 < t1) { fetch(nw, t0, e, lid); }
  // One barrier a step: x's buffer t % 2 was last read in step t - 2, before every subgroup passed step
  // t - 1's barrier; a subgroup's own slot was last read by its own products of step t - 1, which issued
  // (their fragments loaded) before its stores of step t issue.
  for (var t = t0; t < t1; t++) {
    stage(t, e, lid);
    workgroupBarrier();
    if (t + 1u < t1) { fetch(nw, t + 1u, e, lid); }
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
  if (SPLITS > 1u) {     // publish the partials; the column's last workgroup goes on
    for (var i = 0u; i < 8u; i++) {
      let q = e + 32u * i;
      let m = q / 16u;
      let n = n0 + q % 16u;
      if (m < mlim && n < nlim) { atomicStore(&PS[(wid.z * D.m + m) * D.rows + n], bitcast<u32>(result(sg, q))); }
    }
    storageBarrier();     // release: the partials before the count
    if (lid == 0u) { (*bufferView<array<u32, FLAG + 1u>>(&sm, 0))[FLAG] = atomicAdd(&CNT[wid.x], 1u) + 1u; }
    workgroupBarrier();
    if ((*bufferView<array<u32, FLAG + 1u>>(&sm, 0))[FLAG] != SPLITS) { return; }
  }
  for (var i = 0u; i < 8u; i++) {
    let q = e + 32u * i;
    let m = q / 16u;
    let n = n0 + q % 16u;
    if (GLU) {      // the gate subgroups store; their up rows are subgroup sg + S / 2's
      if (sg < S / 2u && m < mlim && n < D.n) {
        store(m, n, act(total(sg, q, m, n)) * total(sg + S / 2u, q, m, D.n + n));
      }
    } else if (m < mlim && n < D.rows) {
      store(m, D.col0 + n, total(sg, q, m, n));
    }
  }
  if (SPLITS > 1u && lid == 0u) { atomicStore(&CNT[wid.x], 0u); }
}
