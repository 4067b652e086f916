"""The long sweeps: CI runs representative points of them; ``OXIGPU_FULL_TESTS=1`` runs all of them
(README, Testing). Points left out by default are marked ``full`` and reported as skipped with that reason,
so the count of what CI did not run stays visible."""
from __future__ import annotations

import os
from collections.abc import Iterable

import pytest

FULL = os.environ.get("OXIGPU_FULL_TESTS", "") not in ("", "0")


def points(values: Iterable, ci: Iterable, ids: Iterable[str] | None = None) -> list:
    """``values`` for ``pytest.mark.parametrize``, those not in ``ci`` marked ``full``."""
    ci = list(ci)
    ids = list(ids) if ids is not None else None
    return [v if v in ci else pytest.param(*(v if isinstance(v, tuple) else (v,)), marks=pytest.mark.full,
                                           id=None if ids is None else ids[i])
            for i, v in enumerate(values)]
