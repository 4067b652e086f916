"""Models by name from the Hugging Face Hub, the way llama.cpp (``-hf``) and Ollama name them.

    org/repo:Q4_K_M          the repository's file(s) of that quant type (a split set is fetched whole)
    org/repo/path/file.gguf  that file (and the rest of its split set)
    org/repo                 its only .gguf, else its Q4_K_M, else an error listing what it has

Downloads go through `huggingface_hub`: its cache (``HF_HOME`` / ``HF_HUB_CACHE``), its token
(``HF_TOKEN`` or ``hf auth login``; or ``token=``), resumable transfers and tqdm progress bars, and
``HF_ENDPOINT`` for a mirror. With ``HF_HUB_OFFLINE=1`` nothing is fetched: the name resolves from the
cache alone. Every failure is a `ModelNotFoundError` saying what was asked, what exists, and what to do.
"""
from __future__ import annotations

import os
import re
from dataclasses import dataclass
from pathlib import Path

from .errors import ModelNotFoundError

_REF = re.compile(r"^(?P<repo>[A-Za-z0-9][\w.-]*/[A-Za-z0-9][\w.-]*)"
                  r"(?::(?P<quant>[A-Za-z0-9][\w.-]*)|/(?P<file>[^:]+\.gguf))?$")
_SPLIT = re.compile(r"^(?P<stem>.*)-(?P<i>\d{5})-of-(?P<n>\d{5})\.gguf$")
_QUANT_TAG = re.compile(r"(?i)(?<![A-Za-z0-9])(I?Q\d_[A-Z0-9]+(?:_[A-Z0-9]+)?|TQ\d_0|BF16|F16|F32)(?![A-Za-z0-9])")
DEFAULT_QUANT = "Q4_K_M"


@dataclass(frozen=True)
class HubRef:
    """A model named on the Hub: the repository and a quant type or a file in it."""

    repo: str
    quant: str | None = None
    filename: str | None = None
    revision: str = "main"

    def __str__(self) -> str:
        return self.repo + (f":{self.quant}" if self.quant else f"/{self.filename}" if self.filename else "")


def parse_ref(text: str) -> HubRef | None:
    """``text`` as a Hub name, or None when it does not look like one (a local path, say)."""
    if not isinstance(text, str) or text.startswith((".", "/", "~")) or "\\" in text:
        return None
    m = _REF.match(text)
    if m is None:
        return None
    return HubRef(m["repo"], m["quant"], m["file"])


def _offline() -> bool:
    return os.environ.get("HF_HUB_OFFLINE", "").strip().lower() in ("1", "true", "yes", "on")


def _cache_dir() -> str | None:
    """The Hub cache from the environment now (huggingface_hub reads it once, at import)."""
    if os.environ.get("HF_HUB_CACHE"):
        return os.environ["HF_HUB_CACHE"]
    if os.environ.get("HF_HOME"):
        return os.path.join(os.environ["HF_HOME"], "hub")
    return None


def _where(endpoint: str | None) -> str:
    return endpoint or os.environ.get("HF_ENDPOINT") or "the Hugging Face Hub"


def download(ref: HubRef | str, *, token: str | bool | None = None, cache_dir: str | Path | None = None,
             endpoint: str | None = None) -> Path:
    """The local path of ``ref``'s file (the first shard of a split set), fetched into the Hub cache
    unless it is there already."""
    if isinstance(ref, str):
        parsed = parse_ref(ref)
        if parsed is None:
            raise ModelNotFoundError(f"{ref!r} is not a Hub model name (org/repo, org/repo:QUANT or "
                                     "org/repo/file.gguf)")
        ref = parsed
    from huggingface_hub import hf_hub_download
    endpoint = endpoint or os.environ.get("HF_ENDPOINT") or None
    cache_dir = cache_dir or _cache_dir()
    token = token if token is not None else (os.environ.get("HF_TOKEN") or None)   # read now, not at import
    offline = _offline()
    files = _list_files(ref, token, cache_dir, endpoint, offline)
    try:
        wanted = choose(ref, files)
    except ModelNotFoundError as e:
        if offline:
            raise ModelNotFoundError(f"{e} (HF_HUB_OFFLINE is set: only the files already in the local cache "
                                     "were searched)") from None
        raise
    paths = []
    for name in wanted:
        try:
            paths.append(Path(hf_hub_download(ref.repo, name, revision=ref.revision, cache_dir=cache_dir,
                                              token=token, endpoint=endpoint, local_files_only=offline)))
        except Exception as e:   # huggingface_hub's and the network's errors, as one clear message
            raise _error(ref, e, endpoint, offline, name) from None
    return paths[0]


def _list_files(ref: HubRef, token, cache_dir, endpoint: str | None, offline: bool) -> list[str]:
    """Every file of the repository at ``ref.revision``: from the Hub, or offline from the cached snapshot."""
    try:
        if offline:
            from huggingface_hub import snapshot_download
            root = Path(snapshot_download(ref.repo, revision=ref.revision, cache_dir=cache_dir,
                                          local_files_only=True, allow_patterns=["*.gguf"]))
            return sorted(p.relative_to(root).as_posix() for p in root.rglob("*") if p.is_file())
        from huggingface_hub import HfApi
        return sorted(HfApi(endpoint=endpoint, token=token).list_repo_files(ref.repo, revision=ref.revision))
    except Exception as e:
        raise _error(ref, e, endpoint, offline, None) from None


def _error(ref: HubRef, e: Exception, endpoint: str | None, offline: bool, name: str | None) -> ModelNotFoundError:
    from huggingface_hub.errors import (
        EntryNotFoundError,
        GatedRepoError,
        LocalEntryNotFoundError,
        RepositoryNotFoundError,
        RevisionNotFoundError,
    )
    where = _where(endpoint)
    if isinstance(e, GatedRepoError):
        return ModelNotFoundError(f"{ref.repo} on {where} is gated: accept its terms on its page and set HF_TOKEN "
                                  "(or run `hf auth login`)")
    if isinstance(e, RepositoryNotFoundError):
        return ModelNotFoundError(f"no model repository {ref.repo!r} on {where} (a private one needs HF_TOKEN)")
    if isinstance(e, RevisionNotFoundError):
        return ModelNotFoundError(f"{ref.repo} has no revision {ref.revision!r} on {where}")
    if offline and isinstance(e, (LocalEntryNotFoundError, EntryNotFoundError, FileNotFoundError)):
        what = f"{ref.repo}/{name}" if name else ref.repo
        return ModelNotFoundError(f"{what} is not in the local Hugging Face cache and HF_HUB_OFFLINE is set; "
                                  "download it once online (or unset HF_HUB_OFFLINE)")
    if isinstance(e, EntryNotFoundError):
        return ModelNotFoundError(f"{ref.repo} on {where} has no file {name!r}")
    return ModelNotFoundError(f"could not get {ref} from {where}: {type(e).__name__}: {e}")


def choose(ref: HubRef, files: list[str]) -> list[str]:
    """The files to fetch for ``ref`` among the repository's ``files``: one file, or a whole split set
    (shards in order); a ModelNotFoundError that lists the choices otherwise."""
    ggufs = [f for f in files if f.endswith(".gguf")]
    if not ggufs:
        raise ModelNotFoundError(f"{ref.repo} holds no .gguf file")
    models = [f for f in ggufs if not Path(f).name.lower().startswith("mmproj")]   # vision projectors
    if ref.filename is not None:
        if ref.filename not in ggufs:
            raise ModelNotFoundError(f"{ref.repo} has no file {ref.filename!r}; its GGUF files: {', '.join(ggufs)}")
        return _with_shards(ref.filename, ggufs)
    sets = _sets(models)
    if ref.quant is not None:
        q = ref.quant.lower()
        hits = [s for s in sets if any(t.lower() == q for t in _QUANT_TAG.findall(Path(s[0]).name))]
        if not hits:
            raise ModelNotFoundError(f"{ref.repo} has no {ref.quant} file; quant types there: "
                                     f"{', '.join(quants(models)) or 'none recognised'} ({', '.join(ggufs)})")
    else:
        hits = sets if len(sets) == 1 else \
            [s for s in sets if any(t.upper() == DEFAULT_QUANT for t in _QUANT_TAG.findall(Path(s[0]).name))]
        if not hits:
            raise ModelNotFoundError(f"{ref.repo} holds several models; name one as {ref.repo}:QUANT (quant types "
                                     f"there: {', '.join(quants(models))}) or {ref.repo}/FILE.gguf")
    if len(hits) > 1:
        raise ModelNotFoundError(f"{ref} matches {len(hits)} files ({', '.join(s[0] for s in hits)}); name one "
                                 f"as {ref.repo}/FILE.gguf")
    return _with_shards(hits[0][0], ggufs)


def quants(files: list[str]) -> list[str]:
    """The quant types named in ``files``, upper-cased, in order of appearance."""
    seen: dict[str, None] = {}
    for f in files:
        for t in _QUANT_TAG.findall(Path(f).name):
            seen.setdefault(t.upper())
    return list(seen)


def _sets(files: list[str]) -> list[list[str]]:
    """Files grouped into models: a split set (name-00001-of-0000N.gguf ...) is one model."""
    out: dict[str, list[str]] = {}
    for f in files:
        m = _SPLIT.match(f)
        out.setdefault(m["stem"] if m else f, []).append(f)
    return [sorted(v) for v in out.values()]


def _with_shards(name: str, files: list[str]) -> list[str]:
    m = _SPLIT.match(name)
    if m is None:
        return [name]
    shards = [f"{m['stem']}-{i:05d}-of-{m['n']}.gguf" for i in range(1, int(m["n"]) + 1)]
    missing = [s for s in shards if s not in files]
    if missing:
        raise ModelNotFoundError(f"the split set of {name} is incomplete: {', '.join(missing)} missing")
    return shards
