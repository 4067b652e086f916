// Mixture-of-experts prefill: the tile table of the grouped GEMM (common/gemm_id_true.wgsl), built on the
// device, so a chunk's routing never goes through the host.
// route (one workgroup): count the (token, slot) pairs per expert, lay them out expert by expert in the
// order, and cut each expert's run into tiles of at most BM pairs (the GEMM's row tile): R[0] = number of
// tiles, the order at R[1 ..], R[TILES_AT + 3i ..] = (expert, first index into the order, count) of tile i.
// The GEMM then reads each chosen expert's weight tile once per BM of its pairs. Padded pairs (t >=
// n_tokens) go to a last pseudo-expert E, whose tiles store zeros. The order within a run varies from run
// to run; each pair's output does not depend on it.
// Defines: E, KSEL, T, BM, MAX_TILES, TILES_AT (1 + T KSEL).
#include "common/params.wgsl"

@group(0) @binding(3) var<storage, read> ids: array<i32>;
@group(0) @binding(5) var<storage, read_write> R: array<u32>;

const NE1: u32 = {{E}}u + 1u;
const NA: u32 = (NE1 + 3u) / 4u * 4u;     // array sizes of whole 16 bytes (Tint)
var<workgroup> counts: array<atomic<u32>, NA>;
var<workgroup> starts: array<u32, NA>;
var<workgroup> runs: array<u32, NA>;       // pairs of each expert
var<workgroup> tiles0: array<u32, NA>;     // the first tile of each expert's run

fn expert_of(p: u32, n_pairs: u32) -> u32 {
  if (p >= n_pairs) { return {{E}}u; }
  return min(u32(max(ids[p], 0)), {{E}}u - 1u);
}

@compute @workgroup_size(256)
fn route(@builtin(local_invocation_index) lid: u32) {
  for (var e = lid; e < NE1; e += 256u) { atomicStore(&counts[e], 0u); }
  workgroupBarrier();
  let n_pairs = min(P.n_tokens, {{T}}u) * {{KSEL}}u;
  for (var p = lid; p < {{T}}u * {{KSEL}}u; p += 256u) { atomicAdd(&counts[expert_of(p, n_pairs)], 1u); }
  workgroupBarrier();
  if (lid == 0u) {   // exclusive scans of the pairs and the tiles per expert (E + 1 steps)
    var run = 0u;
    var nt = 0u;
    for (var e = 0u; e < NE1; e++) {
      let c = atomicLoad(&counts[e]);
      starts[e] = run;
      runs[e] = c;
      tiles0[e] = nt;
      run += c;
      nt += (c + {{BM}}u - 1u) / {{BM}}u;
      atomicStore(&counts[e], 0u);
    }
    R[0] = min(nt, {{MAX_TILES}}u);
  }
  workgroupBarrier();
  // each expert's tiles, one expert per lane
  for (var e = lid; e < NE1; e += 256u) {
    let c = runs[e];
    for (var i = 0u; i * {{BM}}u < c; i++) {
      let tile = tiles0[e] + i;
      if (tile < {{MAX_TILES}}u) {
        R[{{TILES_AT}}u + 3u * tile] = e;
        R[{{TILES_AT}}u + 1u + 3u * tile] = starts[e] + i * {{BM}}u;
        R[{{TILES_AT}}u + 2u + 3u * tile] = min({{BM}}u, c - i * {{BM}}u);
      }
    }
  }
  for (var p = lid; p < {{T}}u * {{KSEL}}u; p += 256u) {
    let e = expert_of(p, n_pairs);
    let slot = atomicAdd(&counts[e], 1u);
    R[1u + starts[e] + slot] = p;
  }
}
