"""`oxigpu tokenize`: show how a model's tokenizer splits a text (no weights are loaded)."""
from __future__ import annotations

import click

from .common import friendly_errors, model_option, read_prompt, resolve_model, verbose_option


@click.command("tokenize")
@click.argument("text")
@model_option
@click.option("--ids-only", is_flag=True, help="Print only the list of ids.")
@click.option("--no-bos", is_flag=True, help="Do not add the BOS/EOS tokens the model asks for.")
@verbose_option
@friendly_errors
def tokenize(text: str, model: str | None, ids_only: bool, no_bos: bool, verbose: bool) -> None:
    """Print the tokens of TEXT ('-' reads stdin): one "id 'piece'" line each, or --ids-only."""
    from ..gguf import GGUFFile
    from ..tokenizer import Tokenizer

    with GGUFFile(resolve_model(model)) as gguf:
        tok = Tokenizer.from_metadata(gguf.metadata)
    ids = tok.encode(read_prompt(text), add_special=not no_bos, parse_special=True)
    if ids_only:
        click.echo(str(ids))
        return
    for i in ids:
        click.echo(f"{i:>7} {tok.token_to_piece(i).decode('utf-8', 'backslashreplace')!r}")
