"""`oxigpu chat`: a conversation REPL through the model's chat template.

Each turn renders the whole history, so the KV cache's prefix reuse makes a new turn cost only its own
tokens. Ctrl-C stops the current answer (the partial answer stays in the history; during the template's
rendering, the turn is dropped) and the session goes on; Ctrl-D or /exit quits;
/reset forgets the conversation. The prompt marker is shown only on a terminal, so scripted use
(`printf 'hi\\n' | oxigpu chat`) prints only the answers.
"""
from __future__ import annotations

import sys
from typing import TYPE_CHECKING

import click

from ..errors import OxigpuError
from ..runtime.params import SamplingParams
from .common import friendly_errors, load_llm, load_options, sampling_options, sampling_params

if TYPE_CHECKING:
    from ..api import LLM

HELP = "/exit or Ctrl-D quits, /reset starts over, Ctrl-C stops an answer"


@click.command("chat")
@click.option("--system", default=None, help="System prompt.")
@sampling_options
@load_options
@friendly_errors
def chat(system: str | None, model: str | None, backend: str, n_ctx: int | None, verbose: bool,
         **sampling: object) -> None:
    """Chat with a model (history kept, rendered through its chat template)."""
    params = sampling_params(**sampling)  # type: ignore[arg-type]
    llm = load_llm(model, backend, n_ctx, verbose)
    start = [{"role": "system", "content": system}] if system else []
    history = list(start)
    click.echo(f"chatting with {llm.model_path.name} ({HELP})", err=True)
    interactive = sys.stdin.isatty()
    if interactive:
        import readline  # noqa: F401  (line editing and history for input())
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
