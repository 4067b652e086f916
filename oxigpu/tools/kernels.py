"""Run every registered kernel check (``KERNELS`` / ``CHECKS``) and report error and speed.

Each case runs through :func:`~oxigpu.backends.wgpu.kernel.prepare` (fresh buffers, NaN-poisoned
outputs), is compared with its float64 reference by max relative error (max |err| / max |ref|) or, for a
:class:`ComparedCase` (the sampler's, in ``sample_check``), by its own comparison, and with
``bench`` is timed by wall clock over many copies of its dispatches in one compute pass. Used by
``oxigpu kernels`` and by the tests.
"""
from __future__ import annotations

import fnmatch
from collections.abc import Callable
from dataclasses import dataclass

import numpy as np

from ..backends.wgpu.device import Device
from ..backends.wgpu.kernel import BENCH_ONLY, CHECKS, Case, case_error, load_kernels, prepare, read_written


@dataclass
class ComparedCase(Case):
    """A case whose results are not values to compare by relative error (token ids, packed per-slot state):
    ``compare(case, got, want)`` -> (error, bound, note on what differs), ``got`` as :func:`run_case`
    reads it (the outputs then the written inputs, float32 views of their bytes), ``want`` the reference."""

    compare: Callable[[ComparedCase, list[np.ndarray], list[np.ndarray]], tuple[float, float, str]] | None = None


def load_checks() -> None:
    """Register every check: the kernels' own (``load_kernels``) and those here that need the runtime's
    references, which the device layer may not import (the sampler's)."""
    load_kernels()
    from . import sample_check  # noqa: F401  (registers on import)


@dataclass
class Result:
    check: str
    case: str
    error: float
    tol: float
    ok: bool
    speed: float | None = None     # GB/s or GFLOP/s
    unit: str = ""
    note: str = ""


def _matches(pattern: str | None, text: str) -> bool:
    if not pattern:
        return True
    pat = pattern if any(ch in pattern for ch in "*?[") else f"*{pattern}*"
    return fnmatch.fnmatch(text.lower(), pat.lower())


def run_case(check: str, case: Case, dev: Device, bench: bool = False) -> Result:
    """Check one case; with ``bench`` also time it (the kernel and buffers are built once)."""
    try:
        p = prepare(case.op, case.inputs, case.attrs, case.in_types, dev)
        dev.write_params(case.params())
        dev.submit(p.dispatches)
        got = [dev.read(b, np.float32, s) for b, s in zip(p.out_bufs, p.out_shapes)] + read_written(p, dev)
        case = p.kernel.as_computed(case)
        note = ""
        if isinstance(case, ComparedCase) and case.compare is not None:
            err, tol, note = case.compare(case, got, case.reference())
        else:
            err, tol = case_error(case, got, case.reference())
        res = Result(check, case.name, err, tol, err <= tol, note=note)
        if bench and (case.nbytes or case.flops):
            once = dev.time(p.dispatches, repeat=1)
            secs = dev.time(p.dispatches, repeat=int(min(200, max(3, 0.25 / max(once, 1e-6)))))
            res.speed, res.unit = ((case.nbytes / secs / 1e9, "GB/s") if case.nbytes
                                   else (case.flops / secs / 1e9, "GFLOP/s"))
        return res
    except Exception as e:  # a crashing kernel is a failed check, reported on its row
        note = " ".join(f"{type(e).__name__}: {e}".split())
        return Result(check, case.name, float("inf"), max(np.atleast_1d(case.tol)), False, note=note[:300])


def run_checks(pattern: str | None = None, bench: bool = False, dev: Device | None = None,
               progress: Callable[[str, str], None] | None = None) -> list[Result]:
    """Every registered case whose "check case" text matches ``pattern`` (substring or glob);
    ``progress(check, case)`` is called before each case runs."""
    dev = dev or Device.get()
    load_checks()
    results = []
    for name, gen in CHECKS.items():
        if name in BENCH_ONLY and not bench:
            continue
        for case in gen():
            if _matches(pattern, f"{name} {case.name}"):
                if progress is not None:
                    progress(name, case.name)
                results.append(run_case(name, case, dev, bench))
    return results


def format_table(results: list[Result], dev: Device) -> str:
    """A plain-text table with a device line on top and a pass count at the bottom."""
    info = dev.info()
    lines = [f"device: {info['name']} ({info['backend']}, {info['adapter_type']})"]
    w = max([len(r.case) for r in results] + [4])
    cw = max([len(r.check) for r in results] + [6])
    lines.append(f"{'kernel':<{cw}}  {'case':<{w}}  {'rel.err':>9}  {'tol':>8}  {'':4}  {'speed':>14}")
    for r in results:
        speed = f"{r.speed:9.2f} {r.unit}" if r.speed is not None else ""
        lines.append(f"{r.check:<{cw}}  {r.case:<{w}}  {r.error:9.2e}  {r.tol:8.1e}  "
                     f"{'ok' if r.ok else 'FAIL':4}  {speed:>14}" + (f"  {r.note}" if r.note else ""))
    n_ok = sum(r.ok for r in results)
    lines.append(f"{n_ok}/{len(results)} passed")
    return "\n".join(lines)
