"""`oxigpu chat`: a conversation REPL through the model's chat template.

Each turn renders the whole history, so the KV cache's prefix reuse makes a new turn cost only its own
tokens. Ctrl-C stops the current answer (the partial answer stays in the history; during the template's
rendering, the turn is dropped) and the session goes on; Ctrl-D or /exit quits; /reset forgets the
conversation. The banner and the prompt marker are shown only on a terminal, so scripted
use (`printf 'hi\\n' | oxigpu chat`) prints only the answers. A model without a chat template (a base model)
gets a one-line warning: it is then prompted through a fallback format, which it was never trained on.
`oxigpu run` without a prompt on a terminal comes here too, as llama-cli does.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ..errors import OxigpuError
from ..runtime.params import SamplingParams
from .common import (
    bounded,
    cache_options,
    chat_template_option,
    friendly_errors,
    load_llm,
    load_options,
    model_sampling_defaults,
    read_chat_template,
    sampling_options,
    sampling_params,
    speculative_options,
    speculative_settings,
)

if TYPE_CHECKING:
    from ..api import LLM

HELP = "/exit or Ctrl-D quits, /reset starts over, Ctrl-C stops an answer"


def stdin_is_terminal() -> bool:
    return sys.stdin.isatty()


@click.command("chat")
@click.option("--system", default=None, help="System prompt.")
@chat_template_option
@sampling_options
@speculative_options
@cache_options
@load_options
@friendly_errors
def chat(system: str | None, chat_template_file: str | None, model: str | None, backend: str, n_ctx: int | None,
         verbose: bool, draft_model: str | None, lookup: bool, draft_max: int | None, draft_min: int | None,
         spec_ngram: int | None, cache_type_k: str, cache_type_v: str, **sampling: object) -> None:
    """Chat with a model (history kept, rendered through its chat template)."""
    sampling_params(**sampling)  # type: ignore[arg-type]  (checked before the model loads)
    draft, spec = speculative_settings(draft_model, lookup, draft_max, draft_min, spec_ngram)
    template = read_chat_template(chat_template_file)
    llm = load_llm(model, backend, n_ctx, verbose, chat_template=template, draft_model=draft, speculative=spec,
                       cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    params = sampling_params(**sampling, model=model_sampling_defaults(llm.model_path))  # type: ignore[arg-type]
    converse(llm, params, system, verbose)


def template_warning(llm: LLM) -> str | None:
    """The one-line warning for a model without a chat template, or None when it has one."""
    if llm.tokenizer.chat_template is not None:
        return None
    return (f"warning: {llm.model_path.name} has no chat template (a base model?); its turns use a fallback "
            f"format it was not trained on, so answers may be poor. --chat-template FILE sets one")


def converse(llm: LLM, params: SamplingParams, system: str | None, verbose: bool) -> None:
    """The REPL: read a line, answer it through the chat template, keep the history."""
    params = bounded(params, llm)
    start = [{"role": "system", "content": system}] if system else []
    history = list(start)
    warning = template_warning(llm)
    if warning:
        click.echo(warning, err=True)
    interactive = stdin_is_terminal()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
        click.echo(f"chatting with {llm.model_path.name} ({HELP})", err=True)
    while True:
        try:
            line = input(">>> " if interactive else "")
        except EOFError:
            break
        except KeyboardInterrupt:
            click.echo(f"\n({HELP})", err=True)
            continue
        command = line.strip()
        if not command:
            continue
        if command == "/exit":
            break
        if command == "/reset":
            history = list(start)
            click.echo("(conversation cleared)", err=True)
            continue
        history.append({"role": "user", "content": line})
        try:
            answer = _answer(llm, history, params, verbose)
        except OxigpuError as e:
            answer = None
            click.echo(f"error: {e}", err=True)
        except KeyboardInterrupt:   # between the parts _answer guards itself: the turn stops, the chat goes on
            answer = None
            click.echo("\n(stopped)", err=True)
        if answer is None:   # nothing was generated: the turn is dropped
            history.pop()
            continue
        history.append({"role": "assistant", "content": answer})


def _answer(llm: LLM, history: list[dict[str, str]], params: SamplingParams, verbose: bool) -> str | None:
    """Stream one reply to stdout; Ctrl-C ends it early, also while the template renders (then None: no
    reply). Returns the text shown."""
    try:
        stream = llm.stream_chat(history, params)
    except KeyboardInterrupt:
        click.echo("\n(stopped)", err=True)
        return None
    pieces: list[str] = []
    try:
        for piece in stream:
            pieces.append(piece)
            click.echo(piece, nl=False)
    except KeyboardInterrupt:
        stream.close()
        click.echo("\n(stopped)", err=True)
    click.echo()
    if verbose and stream.result is not None:
        click.echo(f"{stream.result.timings.summary()} | finish: {stream.result.finish_reason}", err=True)
    return "".join(pieces)
