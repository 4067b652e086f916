"""Memory bandwidth by GPU name: the roofline ``oxigpu bench`` reports a tg run's bandwidth against.

Data, not tuning: each row is a vendor's peak or, where noted, a practical figure measured through wgpu.
Add a row for a GPU that is missing (a device not listed gets no roofline unless ``--roofline-gbs`` gives one).
"""
from __future__ import annotations

import re

ROOFLINES: tuple[tuple[str, float, str], ...] = (
    (r"H200", 4800.0, "spec"),
    (r"H100.*NVL", 3900.0, "spec"),
    (r"H100.*PCIe", 2000.0, "spec"),
    (r"H100", 3100.0, "a read-only sweep on an H100 SXM through wgpu"),
    (r"A100.*80GB.*PCIe", 1935.0, "spec"),
    (r"A100.*80GB", 2039.0, "spec"),
    (r"A100", 1555.0, "spec"),
    (r"L40S?\b", 864.0, "spec"),
    (r"\bL4\b", 300.0, "spec"),
    (r"\bA10G?\b", 600.0, "spec"),
    (r"\bT4\b", 320.0, "spec"),
    (r"V100", 900.0, "spec"),
    (r"RTX 4090", 1008.0, "spec"),
    (r"RTX 3090 Ti", 1008.0, "spec"),
    (r"RTX 3090", 936.0, "spec"),
)
"""Memory read bandwidth (GB/s) by adapter name (first match): the practical figure where one was measured,
else the vendor's peak. A device not listed (and any CPU) gets no roofline unless one is given."""


def roofline_for(device_name: str) -> tuple[float, str] | None:
    """(GB/s, where the figure comes from) for an adapter name, or None when it is not in ROOFLINES."""
    for pattern, gbs, source in ROOFLINES:
        if re.search(pattern, device_name):
            return gbs, source
    return None
