"""The architectures oxigpu builds, by ``general.architecture`` name: one line per family module."""
from __future__ import annotations

from ..errors import UnsupportedArchitectureError
from .bert import BERT, NOMIC_BERT
from .family import Family
from .gemma2 import GEMMA2
from .gemma3 import GEMMA3
from .granite import GRANITE
from .llama import LLAMA
from .olmo2 import OLMO2
from .olmoe import OLMOE
from .phi3 import PHI3
from .qwen2 import QWEN2
from .qwen3 import QWEN3
from .qwen3moe import QWEN3MOE

FAMILIES: dict[str, Family] = {f.name: f for f in (
    LLAMA,
    QWEN2,
    QWEN3,
    GEMMA3,
    GEMMA2,
    PHI3,
    OLMO2,
    GRANITE,
    QWEN3MOE,
    OLMOE,
    BERT,
    NOMIC_BERT,
)}


def get_family(arch: str) -> Family:
    """The family of ``arch``; UnsupportedArchitectureError names the supported ones."""
    fam = FAMILIES.get(arch) if isinstance(arch, str) else None
    if fam is None:
        raise UnsupportedArchitectureError(
            f"architecture {arch!r} is not supported; supported: {', '.join(FAMILIES)}")
    return fam
