"""`oxigpu run`: complete one prompt, streaming the text to stdout and a timing line to stderr."""
from __future__ import annotations

import click

from .common import friendly_errors, load_llm, load_options, read_prompt, sampling_options, sampling_params


@click.command("run")
@click.option("-p", "--prompt", required=True, help="Prompt text; '-' reads it from stdin.")
@sampling_options
@load_options
@friendly_errors
def run(prompt: str, model: str | None, backend: str, n_ctx: int | None, verbose: bool,
        **sampling: object) -> None:
    """Generate a continuation of PROMPT (only the new text is printed)."""
    params = sampling_params(**sampling)  # type: ignore[arg-type]
    text = read_prompt(prompt)
    llm = load_llm(model, backend, n_ctx, verbose)
    stream = llm.stream(text, params)
    for piece in stream:
        click.echo(piece, nl=False)
    click.echo()
    result = stream.result
    assert result is not None
    click.echo(f"{result.timings.summary()} | finish: {result.finish_reason}", err=True)
