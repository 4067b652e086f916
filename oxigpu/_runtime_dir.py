"""A private XDG runtime directory for processes started without one.

Mesa's Vulkan drivers (lavapipe included) probe for a Wayland display when the instance is created, and
libwayland prints ``error: XDG_RUNTIME_DIR is invalid or not set in the environment.`` once per probe when
the variable is missing, as it is in containers, cron jobs and CI. Nothing there needs a display, so the
process gets its own directory (per user, mode 0700, as the XDG spec asks) before the GPU library loads.
"""
from __future__ import annotations

import os
import stat
import tempfile


def _usable(path: str) -> bool:
    """A directory this user owns and nobody else can enter (what the XDG spec requires of it)."""
    try:
        st = os.lstat(path)
    except OSError:
        return False
    owner_ok = not hasattr(os, "getuid") or st.st_uid == os.getuid()
    return stat.S_ISDIR(st.st_mode) and owner_ok and not st.st_mode & 0o077


def ensure_runtime_dir() -> None:
    """Set ``XDG_RUNTIME_DIR`` to a private directory when it is unset or not a directory; else leave it."""
    current = os.environ.get("XDG_RUNTIME_DIR", "")
    if os.name != "posix" or (current and os.path.isabs(current) and os.path.isdir(current)):
        return
    path = os.path.join(tempfile.gettempdir(), f"oxigpu-runtime-{os.getuid()}")
    try:
        os.mkdir(path, 0o700)
    except FileExistsError:
        pass
    except OSError:
        return   # an unwritable temp dir: the warnings are cosmetic, never worth failing for
    if not _usable(path):   # someone else's, or a link: never use it, make a fresh one instead
        try:
            path = tempfile.mkdtemp(prefix="oxigpu-runtime-")
        except OSError:
            return
    os.environ["XDG_RUNTIME_DIR"] = path
