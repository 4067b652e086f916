// The experts' GEMV (EXPERT true; matmul_id's decode, ops/moe.py): output row m is the (token, slot) pair
// m = t KSEL + j, whose weights are the D.rows rows of expert IDS[m] in W, and whose x is row t (XSLOT 0)
// or row m (XSLOT 1: the down projection, one input per chosen expert). W holds experts XR0.e0 .. e1 (one
// range per dispatch where all of them exceed one storage binding): a workgroup whose pair's expert is
// elsewhere returns at once, leaving its outputs to the dispatch that binds that expert (IDS read at a
// uniform index is uniform, so no barrier is skipped). Pairs of padded tokens (t >= n_tokens) store zeros.
// Each expert has D.n rows (D.rows only bounds the rows' clamp); with GLU, W holds the gate weights of all
// n_expert experts, then their up weights: expert e's up rows are n_expert D.n rows after its gate rows.
#include "common/params.wgsl"
struct ExpertRange { e0: u32, e1: u32, ksel: u32, xslot: u32, n_expert: u32, _p0: u32, _p1: u32, _p2: u32 }
@group(0) @binding(15) var<storage, read> IDS: array<i32>;
@group(0) @binding(16) var<uniform> XR0: ExpertRange;

var<private> ebase: u32;

fn x_of(m: u32) -> u32 { return select(m / XR0.ksel, m, XR0.xslot == 1u); }
fn x_rows() -> u32 { return select(D.m / XR0.ksel, D.m, XR0.xslot == 1u); }
fn expert_base() -> u32 { return ebase; }
fn glu_up() -> u32 { return XR0.n_expert * D.n; }

// Sets pair m's weight base; false where its expert (ids clamped into 0 .. n_expert - 1) is not bound.
fn expert_begin(m: u32) -> bool {
  let e = min(u32(max(IDS[m], 0)), XR0.n_expert - 1u);
  ebase = (max(e, XR0.e0) - XR0.e0) * D.n * D.row_bytes;
  return e >= XR0.e0 && e < XR0.e1;
}
fn expert_live(m: u32) -> bool { return m / XR0.ksel < P.n_tokens; }
