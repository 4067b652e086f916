"""`oxigpu bench`: llama-bench-like prompt and generation speed (see ``tools/bench.py`` for the method)."""
from __future__ import annotations

import json
import shlex
import sys
from pathlib import Path

import click

from ..errors import InvalidParameterError
from ..runtime.engine import BACKENDS
from ..tools.bench import run_bench, to_markdown
from ..tools.compare import DEFAULT_LLAMACPP_ARGS, DEFAULT_ROWS
from ..tools.spec_bench import EDIT_TASK, PROMPTS
from .common import (
    cache_options,
    friendly_errors,
    model_option,
    speculative_options,
    speculative_settings,
    verbose_option,
)


def _ints(text: str, option: str) -> list[int]:
    try:
        return [int(d) for d in text.split(",")]
    except ValueError:
        raise InvalidParameterError(f"{option} takes comma-separated integers, got {text!r}") from None


def _depths(text: str) -> list[int]:
    return _ints(text, "--depth")


@click.command("bench")
@model_option
@click.option("-p", "--n-prompt", default=512, show_default=True, type=click.IntRange(min=0),
              help="Prompt tokens of the pp test (0 skips it).")
@click.option("-n", "--n-gen", default=128, show_default=True, type=click.IntRange(min=0),
              help="Generated tokens of the tg test (0 skips it).")
@click.option("-d", "--depth", "depth", default=None,
              help="Tokens already in the KV cache for pp and tg; a comma list runs both at each (0,4096). "
                   "[default: 0; 0,4096 with --compare-llamacpp]")
@click.option("-r", "--reps", default=None, type=click.IntRange(min=1),
              help="Timed runs per test (median, min, max), after warm-up. [default: 3; 5 with --compare-llamacpp]")
@click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True)
@click.option("--n-ctx", "n_ctx", type=click.IntRange(min=1), default=None,
              help="Context to allocate (default: the least the tests need).")
@click.option("--temp", "temperature", type=click.FloatRange(min=0), default=0.0, show_default=True,
              help="tg sampling temperature; 0 is greedy (>0 uses `oxigpu run`'s default filters).")
@click.option("--roofline-gbs", type=click.FloatRange(min=0, min_open=True), default=None,
              help="Read bandwidth that tg's GB/s is a percentage of (default: the device's, where it is known; "
                   "no percentage on a CPU or an unknown device).")
@click.option("--profile", is_flag=True,
              help="Split a prefill chunk's and a decode step's GPU time by kernel family and node.")
@click.option("--json", "as_json", is_flag=True, help="Print the results as JSON instead of markdown.")
@click.option("--seed", default=0, show_default=True, type=click.IntRange(min=0), help="Of the token ids.")
@click.option("--compare-llamacpp", "llamacpp", default=None, type=click.Path(exists=True, file_okay=False),
              help="Folder of llama.cpp's binaries (llama-bench): run it and oxigpu one after the other on the "
                   "same files, write the side-by-side table (--rows, --out).")
@click.option("--no-llamacpp", is_flag=True,
              help="As --compare-llamacpp without llama.cpp: oxigpu's columns only, no ratio claimed.")
@click.option("--rows", default=None, metavar="SHAPE:TYPE,...",
              help="Comparison: `oxigpu synth` shapes and types to write and run (or -m FILE for one file). "
                   f"[default: {DEFAULT_ROWS}]")
@click.option("--out", "out", default="bench-compare", show_default=True, type=click.Path(file_okay=False),
              help="Comparison: folder for table.md, results.json and log.txt.")
@click.option("--files", default=None, type=click.Path(file_okay=False),
              help="Comparison: keep the synthesized files here and reuse them (default: a temporary folder, "
                   "each file deleted after its row).")
@click.option("--budget", "budget_s", default=None, type=click.FloatRange(min=0, min_open=True), metavar="SECONDS",
              help="Comparison: rows that cannot start within this many seconds are listed as skipped.")
@click.option("--llamacpp-args", default=" ".join(DEFAULT_LLAMACPP_ARGS), show_default=True,
              help="Comparison: llama-bench's options besides -m -p -n -d -r -o.")
@click.option("--batch", "batch", default=None,
              help="Batch sizes (1,4,16,64): llama-batched-bench's aggregate S_PP/S_TG/S of B sequences of "
                   "-p prompt and -n generated tokens each, instead of pp/tg.")
@speculative_options
@cache_options
@click.option("--prompts", "n_prompts", default=len(PROMPTS), show_default=True,
              type=click.IntRange(1, len(PROMPTS)),
              help=f"Speculative bench: how many of its {len(PROMPTS)} code prompts to run (the last, number "
                   f"{EDIT_TASK}, an editing task whose answer repeats the prompt's code).")
@click.option("--dump-prompts", default=None, type=click.Path(file_okay=False),
              help="Speculative bench: write the prompts (chat template applied) here as prompt00.txt ... for "
                   "llama.cpp's tools.")
@verbose_option
@friendly_errors
def bench(model: str | None, n_prompt: int, n_gen: int, depth: str | None, reps: int | None, backend: str,
          n_ctx: int | None, temperature: float, roofline_gbs: float | None, profile: bool, as_json: bool, seed: int,
          llamacpp: str | None, no_llamacpp: bool, rows: str | None, out: str, files: str | None,
          budget_s: float | None, llamacpp_args: str, batch: str | None, draft_model: str | None, lookup: bool,
          draft_max: int | None, draft_min: int | None, spec_ngram: int | None, n_prompts: int,
          dump_prompts: str | None, verbose: bool, cache_type_k: str, cache_type_v: str) -> None:
    """Measure prompt processing (pp) and generation (tg) tokens/s on random token ids; progress goes to
    stderr, the markdown table (or JSON) to stdout.

    With --compare-llamacpp DIR (or --no-llamacpp): the same tests on each of --rows' synthesized files
    (or -m's file), oxigpu then llama.cpp's llama-bench, side by side with their spreads and ratio.

    With -md/--model-draft FILE or --lookup: speculative against plain greedy decoding of -n tokens on 21
    code prompts (tokens/s of each, speed-up, acceptance rate, identical outputs)."""
    draft, spec = speculative_settings(draft_model, lookup, draft_max, draft_min, spec_ngram)
    if spec is not None:
        from ..api import resolve_model_path
        from ..tools import spec_bench
        result = spec_bench.run_spec_bench(
            resolve_model_path(model), resolve_model_path(draft) if draft else None, spec, n_gen=n_gen,
            backend=backend, n_ctx=n_ctx, n_prompts=n_prompts,
            dump_prompts=Path(dump_prompts) if dump_prompts else None, log=lambda line: click.echo(line, err=True))
        click.echo(json.dumps(result, indent=1) if as_json else spec_bench.to_markdown(result).rstrip())
        return
    if llamacpp or no_llamacpp:
        _compare(model, n_prompt, n_gen, _depths(depth or "0,4096"), reps or 5, backend, n_ctx, temperature,
                 profile, as_json, llamacpp, no_llamacpp, rows, out, files, budget_s, llamacpp_args,
                 (cache_type_k, cache_type_v))
        return
    for name, given in (("--rows", rows), ("--files", files), ("--budget", budget_s)):
        if given is not None:
            raise InvalidParameterError(f"{name} needs --compare-llamacpp DIR or --no-llamacpp")
    from ..api import resolve_model_path
    if batch is not None:
        from ..tools import batched_bench
        result = batched_bench.run_batched_bench(
            resolve_model_path(model), n_prompt=n_prompt, n_gen=n_gen, batches=_ints(batch, "--batch"),
            reps=reps or 1, backend=backend, seed=seed, log=lambda line: click.echo(line, err=True),
            cache_type_k=cache_type_k, cache_type_v=cache_type_v, n_ctx=n_ctx)
        click.echo(json.dumps(result, indent=1) if as_json else batched_bench.to_markdown(result).rstrip())
        return
    result = run_bench(resolve_model_path(model), n_prompt=n_prompt, n_gen=n_gen, depths=_depths(depth or "0"),
                       reps=reps or 3,
                       backend=backend, n_ctx=n_ctx, temperature=temperature, profile=profile,
                       roofline_gbs=roofline_gbs, seed=seed, log=lambda line: click.echo(line, err=True),
                       cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    click.echo(json.dumps(result, indent=1) if as_json else to_markdown(result).rstrip())


def _typed_command() -> str:
    """The command line as typed, for the report ('' when not run from the command line)."""
    if Path(sys.argv[0]).name not in ("oxigpu", "__main__.py"):
        return ""
    return "oxigpu " + shlex.join(sys.argv[1:])


def _compare(model: str | None, n_prompt: int, n_gen: int, depths: list[int], reps: int, backend: str,
             n_ctx: int | None, temperature: float, profile: bool, as_json: bool, llamacpp: str | None,
             no_llamacpp: bool, rows: str | None, out: str, files: str | None, budget_s: float | None,
             llamacpp_args: str, cache_types: tuple[str, str] = ("f16", "f16")) -> None:
    from ..tools.compare import Row, Settings, compare, parse_rows
    from ..tools.compare import to_markdown as table
    if llamacpp and no_llamacpp:
        raise InvalidParameterError("--compare-llamacpp and --no-llamacpp exclude each other")
    for name, bad in (("--profile", profile), ("--json", as_json), ("--temp", temperature > 0),
                      ("--n-ctx", n_ctx is not None)):
        if bad:
            raise InvalidParameterError(f"{name} is not taken by the comparison (plain `oxigpu bench` has it)")
    if model and rows:
        raise InvalidParameterError("give -m FILE or --rows, not both")
    if model:
        if not Path(model).is_file():
            raise InvalidParameterError(f"-m: no such file: {model}")
        chosen = [Row(Path(model).stem, path=Path(model))]
    else:
        chosen = parse_rows(rows or DEFAULT_ROWS)
    settings = Settings(n_prompt=n_prompt, n_gen=n_gen, depths=depths, reps=reps, backend=backend,
                        llamacpp=Path(llamacpp) if llamacpp else None, llamacpp_args=shlex.split(llamacpp_args),
                        out=Path(out), files=Path(files) if files else None, budget_s=budget_s,
                        command=_typed_command(), cache_types=cache_types)
    result = compare(chosen, settings, log=lambda line: click.echo(line, err=True))
    click.echo(table(result).rstrip())
    click.echo(f"(written to {Path(out) / 'table.md'}, results.json, log.txt)", err=True)
