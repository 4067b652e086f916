"""The kernels of the ops model families added (split, scale/soft-cap, act, mixture-of-experts routing,
expert GEMVs and grouped GEMMs, mixing) vs float64 references, through their registered checks."""
from __future__ import annotations

import pytest

from oxigpu.backends.wgpu.kernel import CHECKS, Case, load_kernels

pytestmark = pytest.mark.gpu

MINE = ("rowwise", "moe")


def _registered() -> list[Case]:
    load_kernels()
    return [c for name in MINE for c in CHECKS[name]()]


@pytest.mark.parametrize("case", _registered(), ids=lambda c: c.name)
def test_registered_checks(dev, case):
    from oxigpu.tools.kernels import run_case  # the reference as the kernel rounds (as_computed)
    res = run_case("models", case, dev)
    assert res.ok, f"{res.case}: rel. error {res.error:.3g} > {res.tol:.3g} {res.note}"
