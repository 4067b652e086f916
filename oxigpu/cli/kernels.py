"""`oxigpu kernels`: run every GPU kernel check on this machine's adapter (and optionally time them)."""
from __future__ import annotations

import sys

import click

from .progress import on_terminal, stage


@click.command("kernels")
@click.option("--filter", "pattern", default=None, metavar="PATTERN",
              help="Only cases whose 'kernel case' text contains PATTERN (or matches it as a glob).")
@click.option("--bench", is_flag=True, help="Also time each case (GB/s for GEMV-like, GFLOP/s for GEMM) "
              "and run the benchmark-size cases.")
@click.option("--source", "source", default=None, metavar="NAME",
              help="Print the assembled WGSL (after #include and {{DEFINES}}) of the pipelines built by the "
                   "cases whose 'kernel case' text or 'file.wgsl:entry' matches NAME, on this adapter; run nothing.")
def kernels(pattern: str | None, bench: bool, source: str | None) -> None:
    """Check each WGSL kernel against its float64 numpy reference; exit 1 on any failure.

    Progress goes to stderr (a line per kernel; on a terminal, a counter of cases), the table to stdout."""
    from ..backends.wgpu.device import Device
    from ..errors import DeviceError
    from ..tools.kernels import format_table, run_checks

    try:
        dev = Device.get()
    except DeviceError as e:
        raise click.ClickException(str(e)) from e
    if source is not None:
        _print_sources(source, dev)
        return
    stage(f"checking kernels on {dev.info()['name']}" + (" (and timing them)" if bench else ""))
    bar = None
    if on_terminal():
        from tqdm import tqdm
        bar = tqdm(desc="kernel cases", unit=" cases", leave=False, file=sys.stderr)
    current: list[str] = []

    def progress(check: str, case: str) -> None:
        if bar is not None:
            bar.set_postfix_str(f"{check} {case}"[:60], refresh=False)
            bar.update(1)
        elif current != [check]:
            current[:] = [check]
            stage(f"  {check}")

    try:
        results = run_checks(pattern, bench, dev, progress=progress)
    finally:
        if bar is not None:
            bar.close()
    if not results:
        click.echo(f"no kernel check matches {pattern!r}", err=True)
        sys.exit(2)
    click.echo(format_table(results, dev))
    if not all(r.ok for r in results):
        sys.exit(1)


def _print_sources(name: str, dev) -> None:
    from ..backends.wgpu.kernel import kernel_sources
    from ..tools.kernels import load_checks

    load_checks()
    found = kernel_sources(name, dev)
    if not found:
        click.echo(f"no kernel check or shader matches {name!r}", err=True)
        sys.exit(2)
    for ks in found:
        defines = " ".join(f"{k}={v}" for k, v in sorted(ks.defines.items()) if "\n" not in str(v))
        generated = sorted(k for k, v in ks.defines.items() if "\n" in str(v))
        click.echo(f"// ==== {ks.file}:{ks.entry} (as built for: {ks.case})")
        click.echo(f"// defines: {defines}" + (f"; generated blocks: {' '.join(generated)}" if generated else ""))
        click.echo(ks.source)
