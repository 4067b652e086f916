"""Progress on stderr for the commands that take a while: a tqdm bar on a terminal, plain lines otherwise.

A bar that redraws itself is only readable on a terminal; in a log or a pipe it becomes a wall of carriage
returns, so there each stage is written once, as text. Bars are removed when they finish (``leave=False``),
so a run's terminal shows the answer and its timing line, not the history of its loading.
"""
from __future__ import annotations

import sys
import time
from types import TracebackType
from typing import Any, Self

import click


def on_terminal() -> bool:
    return sys.stderr.isatty()


class LoadProgress:
    """The `progress` callback of ``LLM(...)``: a bar over the load stages on a terminal; otherwise one line,
    ``loading NAME: stage, stage, ... ready (1.23 s)``, written as the stages happen."""

    def __init__(self, name: str):
        self.name = name
        self._bar: Any = None
        self._seen: list[str] = []
        self._t0 = time.perf_counter()

    def __enter__(self) -> Self:
        if on_terminal():
            from tqdm import tqdm
            self._bar = tqdm(total=1, desc=f"loading {self.name}", leave=False, file=sys.stderr,
                             bar_format="{desc} |{bar}| {percentage:3.0f}%")
        else:
            click.echo(f"loading {self.name}:", nl=False, err=True)
        return self

    def __call__(self, stage: str, done: int, total: int) -> None:
        if self._bar is not None:
            self._bar.total = total
            self._bar.n = done
            self._bar.set_description_str(f"loading {self.name}: {stage}", refresh=True)
        elif not self._seen or self._seen[-1] != stage:
            click.echo(("," if self._seen else "") + f" {stage}", nl=False, err=True)
            self._seen.append(stage)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
        elif kind is None:
            click.echo(f" ({time.perf_counter() - self._t0:.2f} s)", err=True)
        else:
            click.echo(" failed", err=True)   # ends the line; the error follows on its own


def stage(text: str) -> None:
    """One line saying what a long command is doing now."""
    click.echo(text, err=True)


class Counter:
    """A bar counting ``total`` steps on a terminal (removed when done); nothing elsewhere, where the
    caller's stage lines say what is happening."""

    def __init__(self, total: int, desc: str, enabled: bool = True):
        self._bar: Any = None
        if enabled and on_terminal():
            from tqdm import tqdm
            self._bar = tqdm(total=total, desc=desc, leave=False, file=sys.stderr)

    def __enter__(self) -> Self:
        return self

    def update(self, n: int = 1) -> None:
        if self._bar is not None:
            self._bar.update(n)

    def __exit__(self, kind: type[BaseException] | None, exc: BaseException | None, tb: TracebackType | None) -> None:
        if self._bar is not None:
            self._bar.close()
