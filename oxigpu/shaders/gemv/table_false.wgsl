// No piece of this GEMV looks up a table (gemv/table_true.wgsl).
fn stage_table(lid: u32) {}
