"""The `oxigpu` console script: Ctrl-C at any moment (imports included) is one line on stderr and exit 130.

This module imports nothing heavy, so the handler is in place before click, numpy or wgpu load; the
commands themselves (oxigpu/cli/main.py) turn errors into one line (``friendly_errors``).
"""
from __future__ import annotations

import os
import signal
import sys


def _interrupted() -> None:
    """One line, exit 130 (128 + SIGINT, what a shell reports); a second Ctrl-C changes nothing. Exits at
    once, without interpreter shutdown (which would wait for threads still compiling kernels)."""
    signal.signal(signal.SIGINT, signal.SIG_IGN)
    for stream in (sys.stdout, sys.stderr):
        try:
            stream.flush()
        except (OSError, ValueError):
            pass
    try:
        os.write(2, b"\ninterrupted\n")
    except OSError:
        pass
    os._exit(130)


def main(args: list[str] | None = None) -> None:
    try:
        import click

        from .main import cli
        try:
            code = cli.main(args=args, prog_name="oxigpu", standalone_mode=False)
        except click.exceptions.Abort as e:   # click turns Ctrl-C in its own code (parsing, prompts) into Abort
            if isinstance(e.__context__, KeyboardInterrupt):
                raise KeyboardInterrupt from None
            click.echo("Aborted!", err=True)
            code = 1
        except click.ClickException as e:
            e.show()
            code = e.exit_code
        sys.stdout.flush()
    except KeyboardInterrupt:
        _interrupted()
    sys.exit(code if isinstance(code, int) else 0)
