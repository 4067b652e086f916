"""`oxigpu synth`: write a random-weight GGUF file in a real or tiny model shape."""
from __future__ import annotations

import click

from ..errors import OxigpuError
from ..synth import FTYPES, SHAPES, synthesize


@click.command("synth")
@click.argument("shape", type=click.Choice(list(SHAPES)))
@click.option("-o", "--output", "output", required=True, type=click.Path(dir_okay=False),
              help="GGUF file to write.")
@click.option("--type", "ftype", default="Q4_K_M", show_default=True,
              type=click.Choice(list(FTYPES), case_sensitive=False),
              help="llama.cpp mix (Q4_K_M, Q5_K_M) or one ggml type for every 2-D weight.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(0, 2**32 - 1),
              help="Same seed, same bytes.")
@click.option("--layers", default=None, type=click.IntRange(min=1),
              help="Keep only the first N layers (cheap big shapes).")
def synth(shape: str, output: str, ftype: str, seed: int, layers: int | None) -> None:
    """Write SHAPE with random weights (deterministic from --seed) to OUTPUT."""
    click.echo(f"writing {shape} ({ftype.upper()}, seed {seed}) to {output}", err=True)
    try:
        r = synthesize(shape, output, ftype=ftype.upper(), seed=seed, layers=layers)
    except OxigpuError as e:
        raise click.ClickException(str(e)) from None
    types = ", ".join(f"{t} {n}" for t, n in sorted(r.type_counts.items(), key=lambda kv: -kv[1]))
    click.echo(f"wrote {r.path}: {r.shape.name} ({r.shape.n_layer} layers) {r.ftype} seed {r.seed}, "
               f"{r.n_params / 1e6:.1f}M params, {r.file_bytes / 2**20:.1f} MiB, {r.seconds:.1f} s [{types}]")
