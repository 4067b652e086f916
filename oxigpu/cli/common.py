"""What the model-running commands share: options, model loading with a progress bar, error handling.

Errors a user can cause (missing file, bad GGUF, unknown architecture, prompt too long, bad parameter)
become one line on stderr and exit status 1; ``--verbose`` shows the traceback instead.
"""
from __future__ import annotations

import functools
import sys
from collections.abc import Callable, Mapping
from pathlib import Path
from typing import TYPE_CHECKING, Any, TypeVar

import click

from ..errors import InvalidParameterError, OxigpuError
from ..quant.kvcache import KV_TYPES
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
    "-m", "--model", "model", default=None, metavar="FILE|NAME",
    help="GGUF model file, or the name of a packaged model (oxigpu models). "
         "Default: SmolLM2-135M-Instruct (./setup.sh run installs it).")
verbose_option = click.option("-v", "--verbose", is_flag=True, help="Show tracebacks and load details.")

load_options = _stack(
    model_option,
    click.option("--backend", type=click.Choice(BACKENDS), default="auto", show_default=True,
                 help="auto: a hardware GPU when available, else numpy."),
    click.option("-c", "--ctx-size", "--n-ctx", "n_ctx", type=int, default=None,
                 help="Context window in tokens (default 4096, capped by the model)."),
    verbose_option,
)

cache_options = _stack(
    click.option("-ctk", "--cache-type-k", "cache_type_k", type=click.Choice(KV_TYPES, case_sensitive=False),
                 default="f16", show_default=True, help="KV cache type for K (llama.cpp's -ctk)."),
    click.option("-ctv", "--cache-type-v", "cache_type_v", type=click.Choice(KV_TYPES, case_sensitive=False),
                 default="f16", show_default=True, help="KV cache type for V (llama.cpp's -ctv)."),
)

speculative_options = _stack(
    click.option("-md", "--model-draft", "--draft-model", "draft_model", default=None, metavar="FILE|NAME",
                 help="Speculative decoding with this draft model (same vocabulary, e.g. a smaller model of the "
                      "family): it drafts --draft-max tokens, the model verifies them in one step."),
    click.option("--lookup", is_flag=True,
                 help="Speculative decoding by prompt lookup: drafts are what followed the last n-gram earlier "
                      "in the context (no draft model; llama.cpp's --spec-type ngram-simple)."),
    click.option("--draft-max", "--draft", "--spec-draft-n-max", "draft_max", type=int, default=None,
                 help="Tokens drafted per speculative round. [default: 5]"),
    click.option("--draft-min", "--spec-draft-n-min", "draft_min", type=int, default=None,
                 help="Fewer drafts than this run a plain step instead. [default: 1]"),
    click.option("--spec-ngram-size-n", "--spec-ngram-simple-size-n", "--lookup-ngram", "spec_ngram", type=int,
                 default=None,
                 help="--lookup: the longest n-gram matched (shorter ones down to 1 are tried). [default: 3]"),
)


def speculative_settings(draft_model: str | None, lookup: bool, draft_max: int | None, draft_min: int | None,
                         spec_ngram: int | None) -> tuple[str | None, dict[str, Any] | None]:
    """The draft model and the ``speculative=`` of the speculative options, checked before anything loads."""
    from ..runtime.speculative import SpeculativeConfig
    if draft_model is not None and lookup:
        raise InvalidParameterError("--lookup and -md/--model-draft: give one of them")
    if draft_model is None and not lookup:
        for name, value in (("--draft-max", draft_max), ("--draft-min", draft_min),
                            ("--spec-ngram-size-n", spec_ngram)):
            if value is not None:
                raise InvalidParameterError(f"{name} needs -md/--model-draft FILE or --lookup")
        return None, None
    if draft_model is not None and spec_ngram is not None:
        raise InvalidParameterError("--spec-ngram-size-n is for --lookup")
    spec: dict[str, Any] = {"method": "lookup" if lookup else "draft"}
    for key, value in (("num_tokens", draft_max), ("min_tokens", draft_min), ("ngram", spec_ngram)):
        if value is not None:
            spec[key] = value
    if "ngram" in spec and spec["ngram"] < SpeculativeConfig.ngram_min:
        raise InvalidParameterError(f"--spec-ngram-size-n must be >= 1, got {spec['ngram']}")
    if "num_tokens" in spec and "min_tokens" not in spec:
        spec["min_tokens"] = min(SpeculativeConfig.min_tokens, spec["num_tokens"])
    SpeculativeConfig(**spec)        # ranges checked now, with the config's messages
    return draft_model, spec


def speculative_line(llm: LLM) -> str | None:
    """The speculative counters of `llm` as one stderr line (None without speculation)."""
    st = llm.speculative_stats
    if st is None:
        return None
    return (f"speculative: {st['rounds']} rounds, {st['accepted']}/{st['drafted']} drafts accepted "
            f"({100 * st['acceptance_rate']:.1f} %), {st['tokens_per_round']:.2f} tokens per round, "
            f"{st['plain_steps']} plain steps")


chat_template_option = click.option(
    "--chat-template", "chat_template_file", default=None, type=click.Path(dir_okay=False), metavar="FILE",
    help="A jinja2 chat template file to use instead of the model's (same sandbox).")


def read_chat_template(path: str | None) -> str | None:
    """The text of a --chat-template file (None when not given); unreadable files are one-line errors."""
    if path is None:
        return None
    try:
        return Path(path).read_text(encoding="utf-8")
    except FileNotFoundError:
        raise InvalidParameterError(f"--chat-template: no such file: {path}") from None
    except UnicodeDecodeError as e:
        raise InvalidParameterError(
            f"--chat-template: {path} is not UTF-8 text ({e.reason} at byte {e.start})") from None
    except OSError as e:
        raise InvalidParameterError(f"--chat-template: cannot read {path}: {e.strerror}") from None


UNTIL_FULL = 2**31 - 1
"""max_tokens for `-n -1`: more than any context holds, so generation ends when the context is full or
the model stops (`bounded` trims it to the context once the model is loaded)."""


def _default(name: str) -> Any:
    return getattr(SamplingParams, name)


def _model_default(name: str, text: str) -> str:
    return f"{text} [default: the model's own, else {_default(name)}]"


# Spelled as llama.cpp spells them; the older long names stay as aliases. The sampling settings a user does not
# give come from the model (model_sampling_defaults), else llama.cpp's defaults, as llama.cpp does.
sampling_options = _stack(
    click.option("-n", "--n-predict", "max_tokens", type=int, default=_default("max_tokens"), show_default=True,
                 help="Most tokens to generate; -1: until the context is full or the model stops."),
    click.option("-t", "--temp", "temperature", type=float, default=None,
                 help=_model_default("temperature", "Sampling temperature; 0 is greedy.")),
    click.option("--top-k", type=int, default=None, help=_model_default("top_k", "0 disables.")),
    click.option("--top-p", type=float, default=None, help=_model_default("top_p", "1 disables.")),
    click.option("--min-p", type=float, default=None, help=_model_default("min_p", "0 disables.")),
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
    click.option("--repeat-penalty", type=float, default=None, help=_model_default("repeat_penalty", "1 disables.")),
    click.option("--repeat-last-n", type=int, default=None,
                 help=_model_default("repeat_last_n",
                                     "Tokens the penalties look back on (0 off, -1 the whole context).")),
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
    click.option("-s", "--seed", type=int, default=None, help="Same seed, same output (default: random)."),
    click.option("--stop", multiple=True, help="Stop at this string (repeatable); it is not printed."),
    click.option("--json", "json_mode", is_flag=True, help="Output one JSON object."),
    click.option("--json-schema", "json_schema_file", type=click.Path(dir_okay=False),
                 help="Output JSON valid under this JSON Schema file."),
    click.option("--grammar", "grammar_file", type=click.Path(dir_okay=False),
                 help="Output accepted by this grammar file (GBNF or Lark)."),
    click.option("--regex", help="Output fully matching this regular expression."),
)

# GGUF keys a model file may carry its recommended sampling in (llama.cpp reads the same ones).
MODEL_SAMPLING_KEYS = {"temperature": "general.sampling.temp", "top_k": "general.sampling.top_k",
                       "top_p": "general.sampling.top_p", "min_p": "general.sampling.min_p",
                       "repeat_penalty": "general.sampling.penalty_repeat",
                       "repeat_last_n": "general.sampling.penalty_last_n"}


def sampling_params(max_tokens: int, seed: int | None, stop: tuple[str, ...], json_mode: bool = False,
                    json_schema_file: str | None = None, grammar_file: str | None = None,
                    model: Mapping[str, Any] | None = None, **rest: Any) -> SamplingParams:
    """The sampling options of a command as validated SamplingParams (`-n -1` as UNTIL_FULL; constraint files
    read here); the settings in MODEL_SAMPLING_KEYS left as None take `model`'s defaults
    (model_sampling_defaults), else SamplingParams'."""
    if max_tokens < -1:
        raise InvalidParameterError(
            f"-n/--n-predict must be >= 0, or -1 (until the context is full or the model stops), got {max_tokens}")
    constraint: dict[str, Any] = {"json": json_mode}
    if json_schema_file is not None:
        constraint["json_schema"] = _read_text(json_schema_file, "--json-schema")
    if grammar_file is not None:
        constraint["grammar"] = _read_text(grammar_file, "--grammar")
    given = {name: rest.pop(name) for name in MODEL_SAMPLING_KEYS if name in rest}
    values = {**(model or {}), **{k: v for k, v in given.items() if v is not None}}
    return SamplingParams(max_tokens=UNTIL_FULL if max_tokens == -1 else max_tokens, seed=seed, stop=stop,
                          **constraint, **values, **rest)


def model_sampling_defaults(path: Path) -> dict[str, Any]:
    """The sampling a model recommends: its file's ``general.sampling.*`` keys, else its package's published
    settings (model_packages); a value that is not a valid setting is skipped with a warning."""
    from ..gguf import GGUFFile
    from ..model_packages import recommended_sampling
    out = recommended_sampling(path)
    with GGUFFile(path) as f:
        meta = f.metadata
        for name, key in MODEL_SAMPLING_KEYS.items():
            if key not in meta:
                continue
            value = meta[key]
            value = value.item() if hasattr(value, "item") else value
            try:
                SamplingParams(**{name: value})
            except (InvalidParameterError, TypeError):
                click.echo(f"warning: {path.name}: ignoring {key}={value!r} (not a valid {name})", err=True)
                continue
            out[name] = value
    return out


def bounded(params: SamplingParams, llm: LLM) -> SamplingParams:
    """`params` with max_tokens at most the context (what `-n -1` amounts to once the model is known)."""
    return params.with_overrides(max_tokens=llm.n_ctx) if params.max_tokens > llm.n_ctx else params


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


def load_llm(model: str | None, backend: str, n_ctx: int | None, verbose: bool,
             chat_template: str | None = None, draft_model: str | None = None,
             speculative: Mapping[str, Any] | None = None, cache_type_k: str = "f16",
             cache_type_v: str = "f16") -> LLM:
    """Resolve the model (default when None) and load it, showing progress on stderr (see progress.py);
    with ``draft_model`` (or ``speculative``) it decodes speculatively."""
    from ..api import LLM
    from .progress import LoadProgress
    path = resolve_model(model)
    draft = resolve_model(draft_model) if draft_model is not None else None
    with LoadProgress(path.name) as progress:
        llm = LLM(path, backend=backend, n_ctx=n_ctx, verbose=verbose, progress=progress,
                  chat_template=chat_template, cache_type_k=cache_type_k, cache_type_v=cache_type_v)
    if draft is None and speculative is None:
        return llm
    draft_llm = None
    if draft is not None:
        with LoadProgress(draft.name) as progress:
            draft_llm = LLM(draft, backend=llm.backend, n_ctx=llm.n_ctx, verbose=verbose, progress=progress,
                            max_seqs=1)
    llm.speculate(draft_llm, speculative)
    return llm


def resolve_model(model: str | None) -> Path:
    """The model file (default when None, a packaged model by name, org/repo[:QUANT] from the Hugging Face
    Hub), saying so on stderr when a packaged model is assembled on first use."""
    from ..api import resolve_model_path
    return resolve_model_path(model, log=lambda line: click.echo(line, err=True))


def read_prompt(prompt: str) -> str:
    """`-` means stdin (its trailing newlines dropped, as a shell pipeline adds one).

    An empty prompt is refused here, before a model is loaded for nothing.
    """
    if prompt == "-":
        prompt = sys.stdin.read().rstrip("\n")
    if not prompt:
        raise InvalidParameterError("the prompt is empty")
    return prompt
