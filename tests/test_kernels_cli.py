"""`oxigpu kernels` covers the sampler: its check is registered from oxigpu/tools (the numpy twin is the
runtime's, which the device layer may not import), passes on this adapter and fails when the kernel
draws anything but the twin's tokens."""
from __future__ import annotations

import numpy as np
import pytest
from click.testing import CliRunner

from oxigpu.backends.wgpu.kernel import CHECKS
from oxigpu.runtime import sampling
from oxigpu.tools.kernels import load_checks, run_case

pytestmark = pytest.mark.gpu


def test_kernels_filter_sample_runs_the_sampler_check(dev):
    from oxigpu.cli.main import cli
    res = CliRunner().invoke(cli, ["kernels", "--filter", "sample *vocab=5 *"])
    assert res.exit_code == 0, res.output
    rows = [ln for ln in res.output.splitlines() if ln.startswith("sample ")]
    assert len(rows) == 2 and all(" ok " in r for r in rows), res.output
    assert {"chain", "greedy"} == {r.split()[1] for r in rows}
    assert "2/2 passed" in res.output


def test_sampler_check_fails_on_a_different_draw(dev):
    """The same case with one slot's seed changed on the device only: its token (and state) no longer
    match the twin's, and the row says which slot."""
    load_checks()
    case = next(c for c in CHECKS["sample"]() if c.name.startswith("chain vocab=3001"))
    want = case.reference()
    seed = sampling.SLOT_FIELDS.index(("seed", "u32"))
    case.inputs[1].view(np.uint32)[2, seed] ^= 0x5A5A
    case.reference = lambda: want
    res = run_case("sample", case, dev)
    assert not res.ok and res.error >= 1 and res.note.startswith("tokens differ (slot 2:"), res
