"""`oxigpu run`: complete one prompt, as llama-cli does: the prompt, then the continuation streamed to
stdout, then one timing line on stderr. Without -p on a terminal it starts a chat instead (llama-cli's
conversation mode)."""
from __future__ import annotations

import click

from ..errors import InvalidParameterError
from . import chat as chat_module
from .common import (
    bounded,
    cache_options,
    chat_template_option,
    friendly_errors,
    load_llm,
    load_options,
    model_sampling_defaults,
    read_chat_template,
    read_prompt,
    sampling_options,
    sampling_params,
    speculative_line,
    speculative_options,
    speculative_settings,
)


@click.command("run")
@click.option("-p", "--prompt", default=None,
              help="Prompt text; '-' reads it from stdin. Without it, on a terminal: an interactive chat.")
@click.option("--display-prompt/--no-display-prompt", "display_prompt", default=True, show_default=True,
              help="Print the prompt before the continuation.")
@chat_template_option
@sampling_options
@speculative_options
@cache_options
@load_options
@friendly_errors
def run(prompt: str | None, display_prompt: bool, chat_template_file: str | None, model: str | None,
        backend: str, n_ctx: int | None, verbose: bool, draft_model: str | None, lookup: bool,
        draft_max: int | None, draft_min: int | None, spec_ngram: int | None, cache_type_k: str, cache_type_v: str,
        **sampling: object) -> None:
    """Generate a continuation of PROMPT (shown after the prompt itself)."""
    sampling_params(**sampling)  # type: ignore[arg-type]  (checked before the model loads)
    draft, spec = speculative_settings(draft_model, lookup, draft_max, draft_min, spec_ngram)
    template = read_chat_template(chat_template_file)
    if prompt is None:
        if not chat_module.stdin_is_terminal():
            raise InvalidParameterError("no prompt: pass -p TEXT, or -p - to read it from stdin "
                                        "(on a terminal, run without -p starts a chat)")
        llm = load_llm(model, backend, n_ctx, verbose, chat_template=template, draft_model=draft, speculative=spec,
                       cache_type_k=cache_type_k, cache_type_v=cache_type_v)
        params = sampling_params(**sampling, model=model_sampling_defaults(llm.model_path))  # type: ignore[arg-type]
        chat_module.converse(llm, params, None, verbose)
        return
    text = read_prompt(prompt)
    llm = load_llm(model, backend, n_ctx, verbose, chat_template=template, draft_model=draft, speculative=spec,
                       cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    params = sampling_params(**sampling, model=model_sampling_defaults(llm.model_path))  # type: ignore[arg-type]
    stream = llm.stream(text, bounded(params, llm))
    if display_prompt:
        click.echo(text, nl=False)
    for piece in stream:
        click.echo(piece, nl=False)
    click.echo()
    result = stream.result
    assert result is not None
    click.echo(f"{result.timings.summary()} | {llm.backend} | finish: {result.finish_reason}", err=True)
    line = speculative_line(llm)
    if line:
        click.echo(line, err=True)
