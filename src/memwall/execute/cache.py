"""The per-user cache: work that does not depend on a sweep folder, done once per model.

Owns: where the cache is (:func:`cache_root`: ``$MEMWALL_CACHE`` if set, else
``$XDG_CACHE_HOME/memwall``, else ``~/.cache/memwall``; ``MEMWALL_CACHE=off`` turns it
off), the folder of validation predictions in it (:func:`predictions_folder`) and the
store of finished sweep cases (:func:`cases_cache`: a case any sweep folder ran is copied
into the next folder that asks for it). Its
entries are the case store's records (:class:`memwall.execute.store.Store`: no link
followed, sizes and types checked, checksummed, temp files of killed writers removed,
claims for concurrent writers), keyed by :func:`memwall.simulation.row.case_key`: the
case, the profile's and the network's content and :data:`memwall.MODEL_VERSION`. So a
model change never reuses a prediction, and a damaged entry is recomputed, never trusted.
"""

from __future__ import annotations

import os
import sys
from pathlib import Path
from typing import TYPE_CHECKING

if TYPE_CHECKING:
    from .store import Store

OFF = ("off", "none", "0", "false")


def cache_root() -> Path | None:
    """The cache folder, or None when ``MEMWALL_CACHE`` turns it off."""
    env = os.environ.get("MEMWALL_CACHE")
    if env is not None and env.strip().lower() in OFF:
        return None
    if env:
        return Path(env).expanduser()
    xdg = os.environ.get("XDG_CACHE_HOME")
    return (Path(xdg) if xdg and Path(xdg).is_absolute() else Path.home() / ".cache") / "memwall"


def predictions_folder(fallback: Path | None) -> Path | None:
    """The folder validation predictions are stored in: the cache's ``validation/``, or
    ``fallback`` (a sweep folder's own; None: nowhere) when the cache is off or cannot be
    made, said in one line."""
    root = cache_root()
    if root is None:
        return fallback
    folder = root / "validation"
    try:
        folder.mkdir(parents=True, exist_ok=True)
        if folder.is_symlink() or not folder.is_dir():
            raise OSError("not a folder")
    except OSError as err:
        where = f"go to {fallback}" if fallback is not None else "are not kept"
        print(f"memwall: the cache {folder} cannot be used ({err}); validation predictions {where} "
              "(set MEMWALL_CACHE to another folder, or MEMWALL_CACHE=off)", file=sys.stderr)
        return fallback
    return folder


def cases_cache() -> Store | None:
    """The per-user store of finished sweep cases (records as a sweep folder keeps them),
    or None when the cache is off or cannot be made."""
    from .store import Store

    folder = predictions_folder(None)  # checks the cache root as the predictions do
    if folder is None:
        return None
    return Store(folder.parent / "sweep", on_damaged=None)


def cache_store(name: str, content: str) -> Store | None:
    """The per-user store ``name`` of records holding a ``content`` table (the figures'
    data, their drawings), or None when the cache is off."""
    from .store import Store

    root = cache_root()
    return None if root is None else Store(root / name, content=content)
