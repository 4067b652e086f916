"""The kernels of the ops model families added (split, scale/soft-cap, act, mixture-of-experts routing,
expert GEMVs and grouped GEMMs, mixing) vs float64 references, through their registered checks."""
from __future__ import annotations

import pytest

from oxigpu.backends.wgpu.kernel import CHECKS, Case, case_error, load_kernels, run_op

pytestmark = pytest.mark.gpu

MINE = ("rowwise", "moe")


def _registered() -> list[Case]:
    load_kernels()
    return [c for name in MINE for c in CHECKS[name]()]


@pytest.mark.parametrize("case", _registered(), ids=lambda c: c.name)
def test_registered_checks(dev, case):
    got = run_op(case.op, case.inputs, case.attrs, case.pos, case.n_tokens, case.in_types, dev)
    err, tol = case_error(case, got, case.reference())
    assert err <= tol, f"{case.name}: rel. error {err:.3g} > {tol:.3g}"
