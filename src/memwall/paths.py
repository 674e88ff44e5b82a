"""Output paths, checked before any work: one clear line when one cannot be written.

Owns: :func:`writable_dir` (a folder that exists or can be created, and can be written
to) and :func:`writable_file` (a file whose folder exists and can be written to, and
which is not itself a folder). Every command that writes checks its outputs with these
before it loads, measures or simulates anything, so a bad ``--out`` costs nothing.
"""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import InputError


def _reason(err: OSError) -> str:
    return err.strerror or str(err)


def _probe(folder: Path, field: str, shown: str) -> None:
    """Write and remove a small file in ``folder``: the only honest test of writability."""
    try:
        fd, tmp = tempfile.mkstemp(dir=folder, prefix=".memwall-probe-")
    except OSError as err:
        raise InputError(f"cannot write into {shown}: {_reason(err)}", field=field) from None
    try:
        os.write(fd, b"x")
        os.fsync(fd)
    except OSError as err:
        raise InputError(f"cannot write into {shown}: {_reason(err)}", field=field) from None
    finally:
        os.close(fd)
        os.unlink(tmp)


def writable_dir(path: str | os.PathLike[str], *, field: str) -> Path:
    """``path`` as a folder that exists or can be created (nothing is created yet), writable."""
    text = os.fspath(path)
    if not str(text).strip():
        raise InputError("an empty path; name a folder", field=field)
    folder = Path(text)
    if folder.exists():
        if not folder.is_dir():
            raise InputError(f"{folder} exists and is not a folder", field=field)
        _probe(folder, field, str(folder))
        return folder
    # The nearest existing ancestor must be a folder we may create entries in.
    parent = folder.absolute().parent
    while not parent.exists():
        parent = parent.parent
    if not parent.is_dir():
        raise InputError(f"cannot create {folder}: {parent} is not a folder", field=field)
    if not os.access(parent, os.W_OK | os.X_OK):
        raise InputError(f"cannot create {folder}: {parent} is not writable", field=field)
    _probe(parent, field, f"{parent} (to create {folder})")
    return folder


def writable_file(path: str | os.PathLike[str], *, field: str) -> Path:
    """``path`` as a file that can be written: its folder exists and takes a new file."""
    text = os.fspath(path)
    if not str(text).strip():
        raise InputError("an empty path; name a file", field=field)
    target = Path(text)
    if target.is_dir():
        raise InputError(f"{target} is a folder; name a file inside it", field=field)
    parent = target.absolute().parent
    if not parent.is_dir():
        raise InputError(f"cannot write {target}: the folder {target.parent} does not exist", field=field)
    if target.exists():
        # Opened for appending, which changes nothing. A device is not probed by writing
        # (a byte to a terminal shows); a full one is caught when written (write_error).
        try:
            with open(target, "ab"):
                pass
        except OSError as err:
            raise InputError(f"cannot write {target}: {_reason(err)}", field=field) from None
        return target
    _probe(parent, field, str(parent))
    return target


def write_error(path: str | os.PathLike[str], err: OSError, *, field: str) -> InputError:
    """An OSError met while writing ``path``, as the one line the CLI prints."""
    return InputError(f"cannot write {os.fspath(path)}: {_reason(err)}", field=field)
