// Where a step's rows and their cache rows are (the batching contract, graph/ir.py): row t is at
// position positions[t] of the sequence in slot row_seq[t], whose logical cache row j lives at physical
// row block_table[s, j / KVB] * KVB + j % KVB. Rows of a sequence are contiguous and in position order.
// Physical rows are clamped into the pool, so a wrong table reads or writes the wrong rows of this cache,
// never another buffer. Defines: MB (block-table width), KVB (rows per block), CROWS (pool rows), and
// POS_B, SEQ_B, BT_B (the three inputs' bindings).
const MB: u32 = {{MB}}u;
const KVB: u32 = {{KVB}}u;
const CROWS: u32 = {{CROWS}}u;
@group(0) @binding({{POS_B}}) var<storage, read> positions: array<i32>;
@group(0) @binding({{SEQ_B}}) var<storage, read> row_seq: array<i32>;
@group(0) @binding({{BT_B}}) var<storage, read> block_table: array<i32>;

fn pos_of(t: u32) -> u32 { return u32(positions[t]); }
fn seq_of(t: u32) -> u32 { return u32(row_seq[t]); }

// The physical cache row of logical row j of slot s.
fn phys(s: u32, j: u32) -> u32 { return min(u32(block_table[s * MB + j / KVB]) * KVB + j % KVB, CROWS - 1u); }

// Physical rows of four logical rows j of slot s that lie in at most two blocks (consecutive keys,
// or clamped to a last one): two table loads, not four.
fn phys4(s: u32, j: vec4<u32>) -> vec4<u32> {
  let b0 = j.x / KVB;
  let b3 = j.w / KVB;
  let e0 = u32(block_table[s * MB + b0]) * KVB;
  let e3 = u32(block_table[s * MB + b3]) * KVB;
  let base = select(vec4<u32>(e0), vec4<u32>(e3), j / vec4<u32>(KVB) == vec4<u32>(b3));
  return min(base + j % vec4<u32>(KVB), vec4<u32>(CROWS - 1u));
}
