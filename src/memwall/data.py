"""Where the shipped era_data lives: machine, network and measurement files.

The top-level ``era_data/`` folder is installed as the package ``memwall.era_data``,
so ``pip install .`` then ``memwall ...`` finds it from any folder.
"""

from __future__ import annotations

import hashlib
from importlib import resources
from pathlib import Path


def era_data_dir() -> Path:
    return Path(str(resources.files("memwall.era_data")))


def toml_files(folder: Path) -> list[Path]:
    """The data files of a folder, in name order: its ``*.toml`` but the templates.

    The listing is kept while the folder's modification time is unchanged (a file added,
    removed or renamed changes it): every profile or preset looked up by id lists its
    folder, and a sweep looks them up for every case."""
    try:
        stamp = folder.stat().st_mtime_ns
    except OSError:
        stamp = None
    kept = _LISTED.get(folder)
    if kept is not None and stamp is not None and kept[0] == stamp:
        return list(kept[1])
    files = sorted(p for p in folder.glob("*.toml") if not p.name.startswith("TEMPLATE"))
    if stamp is not None:
        _LISTED[folder] = (stamp, tuple(files))
    return files


_LISTED: dict[Path, tuple[int, tuple[Path, ...]]] = {}


def data_files(kind: str) -> list[Path]:
    """The shipped ``*.toml`` files of one kind: 'machines', 'networks', 'frameworks' or 'measurements'."""
    return toml_files(era_data_dir() / kind)


def data_version() -> str:
    """A short hash of every shipped data file, so results name the data they used (the
    network files measurements name in ``measurements/networks/`` included)."""
    digest = hashlib.sha256()
    for kind in ("machines", "networks", "frameworks", "measurements"):
        folder = era_data_dir() / kind
        extra = sorted(folder.glob("*/*.toml")) if kind == "measurements" else []
        for path in [*data_files(kind), *extra]:
            digest.update(str(path.relative_to(folder)).encode())
            digest.update(path.read_bytes())
    return digest.hexdigest()[:12]
