"""`oxigpu bench`: llama-bench-like prompt and generation speed (see ``tools/bench.py`` for the method)."""
from __future__ import annotations

import json

import click

from ..errors import InvalidParameterError
from ..runtime.engine import BACKENDS
from ..tools.bench import run_bench, to_markdown
from .common import friendly_errors, model_option, verbose_option


def _depths(text: str) -> list[int]:
    try:
        return [int(d) for d in text.split(",")]
    except ValueError:
        raise InvalidParameterError(f"--depth takes comma-separated integers, got {text!r}") from None


@click.command("bench")
@model_option
@click.option("-p", "--n-prompt", default=512, show_default=True, type=click.IntRange(min=0),
              help="Prompt tokens of the pp test (0 skips it).")
@click.option("-n", "--n-gen", default=128, show_default=True, type=click.IntRange(min=0),
              help="Generated tokens of the tg test (0 skips it).")
@click.option("-d", "--depth", "depth", default="0", show_default=True,
              help="Tokens already in the KV cache for tg; a comma list runs tg at each (0,4096).")
@click.option("-r", "--reps", default=3, show_default=True, type=click.IntRange(min=1),
              help="Timed runs per test (median, min, max), after one warm-up.")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True)
@click.option("--n-ctx", "n_ctx", type=click.IntRange(min=1), default=None,
              help="Context to allocate (default: the least the tests need).")
@click.option("--temp", "temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="tg sampling temperature; 0 is greedy (>0 uses `oxigpu run`'s default filters).")
@click.option("--roofline-gbs", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Read bandwidth that tg's GB/s is a percentage of (default: the device's, where it is known; "
                   "no percentage on a CPU or an unknown device).")
@click.option("--profile", is_flag=True, help="Split a prefill chunk's and a decode step's GPU time by kernel family and node.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of markdown.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Of the token ids.")
@verbose_option
@friendly_errors
def bench(model: str | None, n_prompt: int, n_gen: int, depth: str, reps: int, backend: str, n_ctx: int | None,
          temperature: float, roofline_gbs: float | None, profile: bool, as_json: bool, seed: int, verbose: bool) -> None:
    """Measure prompt processing (pp) and generation (tg) tokens/s on random token ids; progress goes to
    stderr, the markdown table (or JSON) to stdout."""
    from ..api import resolve_model_path
    result = run_bench(resolve_model_path(model), n_prompt=n_prompt, n_gen=n_gen, depths=_depths(depth), reps=reps,
                       backend=backend, n_ctx=n_ctx, temperature=temperature, profile=profile,
                       roofline_gbs=roofline_gbs, seed=seed, log=lambda line: click.echo(line, err=True))
    click.echo(json.dumps(result, indent=1) if as_json else to_markdown(result).rstrip())
