"""What the ablation tools share (dev/ablate_attention_mma.py, ablate_decode_attention.py, bench_gemm.py
--ablate): a kernel built from its expanded source with one part taken out, so that the time differences
tell what each part costs (results wrong on purpose)."""
from __future__ import annotations

import re
from collections.abc import Callable


def drop(pattern: str) -> Callable[[str], str]:
    """An edit that drops the source lines matching ``pattern``."""
    rx = re.compile(pattern)
    return lambda src: "\n".join(line for line in src.split("\n") if not rx.search(line))


def ablate(dev, plain: Callable, shader: str, name: str, edit: Callable[[str], str] | None) -> None:
    """Make ``dev`` build ``shader`` with ``edit`` applied (``plain``: the device's own shader_source; name
    "full" or no edit: as it is). Compiled pipelines are dropped either way, so a kernel built next never
    reuses one of another ablation. An edit that changes nothing raises: it would time the whole kernel
    under the ablation's name."""
    def source(f, d=None, i=None):
        src = plain(f, d, i)
        if f != shader or edit is None or name == "full":
            return src
        new = edit(src)
        if new == src:
            raise ValueError(f"ablation {name} matched nothing in {shader}")
        return new
    dev.shader_source = source
    dev._pipelines.clear()
