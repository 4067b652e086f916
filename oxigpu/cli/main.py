"""The `oxigpu` command: a click group; each verb lives in its own module."""
from __future__ import annotations

import click

from .._version import __version__
from .bench import bench
from .chat import chat
from .diff import diff
from .embed import embed
from .info import info
from .kernels import kernels
from .models import models
from .run import run
from .serve import serve
from .synth import synth
from .tokenize import tokenize


@click.group(context_settings={"help_option_names": ["-h", "--help"]})
@click.version_option(__version__, prog_name="oxigpu")
def cli() -> None:
    """GPU-first LLM inference on WebGPU."""


cli.add_command(info)
cli.add_command(kernels)
cli.add_command(synth)
cli.add_command(run)
cli.add_command(chat)
cli.add_command(tokenize)
cli.add_command(diff)
cli.add_command(bench)
cli.add_command(embed)
cli.add_command(serve)
cli.add_command(models)


def main() -> None:
    """The console script (see `oxigpu.cli.entry`, which installs the Ctrl-C handling first)."""
    from .entry import main as entry_main
    entry_main()
