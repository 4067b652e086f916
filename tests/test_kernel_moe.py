"""The experts' kernels (matmul_id) where the experts' weights exceed one storage binding: bound as ranges
of whole experts, one dispatch each, every pair computed by the dispatch that binds its expert."""
from __future__ import annotations

import pytest

from oxigpu.backends.wgpu.kernel import prepare
from oxigpu.backends.wgpu.ops.moe import _moe_case
from oxigpu.tools.kernels import run_case

pytestmark = pytest.mark.gpu


@pytest.mark.parametrize("T,n_tokens,per_slot", [(1, 1, False), (4, 3, True), (12, 10, False), (9, 9, True)])
def test_matmul_id_over_expert_ranges(dev, T, n_tokens, per_slot):
    """8 experts of 64 Q4_K rows (9216 B each) under a 30000 B binding limit: 3 ranges (3, 3 and 2
    experts). One token and four (the GEMV: pairs <= experts, padded pairs stored as zeros), 12 and 9
    (the grouped GEMM: the padding's pseudo-expert tiles in the first range's dispatch only)."""
    case = _moe_case(f"ranges T={T}", "Q4_K", T, n_tokens, 8, 2, 64, 256, per_slot, seed=20 + T)
    with dev.binding_limit(30000):
        res = run_case("moe", case, dev)
        p = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
    k = p.kernel
    assert len(k.gemv.ranges if k.gemv is not None else k.ranges) == 3
    assert res.ok, (res.error, res.tol, res.note)
