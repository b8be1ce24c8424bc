"""Writing files under OUTPUT_DIR: safe paths and atomic writes.

Every file WorkerPool saves goes through :func:`atomic_write`: readers (and a worker that dies
mid-download) never see a half-written page under its final name, only a hidden ``.part`` file
that is removed on any error. :func:`safe_join` keeps paths taken from messages inside the root.
"""

from __future__ import annotations

import functools
import hashlib
import itertools
import json
import os
import shutil
import stat
import threading
from collections.abc import Iterator
from contextlib import contextmanager, suppress
from pathlib import Path
from typing import Any, BinaryIO

from .errors import UnsafePath

#: Makes temporary names unique even for two writes of one path by one thread.
_sequence = itertools.count()


def safe_join(root: Path, relative: str) -> Path:
    """``root / relative``, refusing any ``relative`` that could land outside ``root``.

    The check runs on the resolved path too, so a symlink inside ``root`` that points outside
    is refused. The path returned is not resolved in its last part: writing to it replaces a
    symlink rather than following it.

    Raises:
        UnsafePath: ``relative`` is empty or absolute, has a ``..`` part, a NUL or a backslash,
            or resolves outside ``root``.
    """
    if not relative or "\x00" in relative or "\\" in relative:
        raise UnsafePath(f"unsafe storage path {relative!r}: empty, or has a NUL or a backslash")
    if relative.startswith("/"):
        raise UnsafePath(f"unsafe storage path {relative!r}: absolute")
    parts = [part for part in relative.split("/") if part not in ("", ".")]
    if ".." in parts:
        raise UnsafePath(f"unsafe storage path {relative!r}: has a '..' part")
    if not parts:
        raise UnsafePath(f"unsafe storage path {relative!r}: names the root itself")
    base = resolved_root(root)
    joined = base.joinpath(*parts)
    # Below the (resolved) root only a symlink can lead outside: one lstat per part, and the
    # full resolution only when a part is a link (realpath of the whole path was 5 % of a worker's CPU).
    below = str(base)
    for part in parts:
        below = os.path.join(below, part)
        try:
            is_link = stat.S_ISLNK(os.lstat(below).st_mode)
        except FileNotFoundError:
            break  # nothing exists below a missing part
        if is_link:
            if not joined.resolve().is_relative_to(base):
                raise UnsafePath(f"unsafe storage path {relative!r}: a symlink leads outside {base}")
            break
    return joined


@functools.lru_cache(maxsize=64)
def resolved_root(root: Path) -> Path:
    """OUTPUT_DIR resolved once per process: the operator's choice, not a message's."""
    return root.resolve()


def _temp_path(path: Path) -> Path:
    # Hidden (leading dot) so listings of finished pages skip it; process, thread and sequence
    # number make it unique without the cost of mkstemp's random retries; the name is cut so
    # that the suffix cannot push it past the 255-byte limit of most filesystems.
    unique = f"{os.getpid()}.{threading.get_ident()}.{next(_sequence)}"
    return path.with_name(f".{path.name[:150]}.{unique}.part")


@contextmanager
def atomic_write(path: Path, *, fsync: bool = False) -> Iterator[BinaryIO]:
    """A binary file that appears at ``path`` only once the ``with`` block succeeds.

    Writes go to a temporary file in the same folder (so the final rename is atomic), which is
    removed if the block raises. Parent folders are created. ``fsync=True`` also makes the file
    durable across a power cut, at a cost that downloads do not need (they can be redone).
    """
    tmp = _temp_path(path)
    try:
        out = open(tmp, "xb")  # noqa: SIM115 - closed below, before the rename
    except FileNotFoundError:
        # Creating folders only when missing saves a syscall per page in the common case.
        path.parent.mkdir(parents=True, exist_ok=True)
        out = open(tmp, "xb")  # noqa: SIM115
    try:
        with out:
            yield out
            if fsync:
                out.flush()
                os.fsync(out.fileno())
        os.replace(tmp, path)
    except BaseException:
        with suppress(FileNotFoundError):
            os.unlink(tmp)
        raise
    if fsync:
        _fsync_folder(path.parent)


def _fsync_folder(folder: Path) -> None:
    # The rename is only durable once the folder entry is on disk as well.
    fd = os.open(folder, os.O_RDONLY)
    try:
        os.fsync(fd)
    finally:
        os.close(fd)


def write_bytes_atomic(path: Path, data: bytes, *, fsync: bool = False) -> None:
    """Write ``data`` to ``path`` atomically (see :func:`atomic_write`)."""
    with atomic_write(path, fsync=fsync) as out:
        out.write(data)


def write_text_atomic(path: Path, text: str, *, fsync: bool = False) -> None:
    """Write ``text`` as UTF-8 to ``path`` atomically."""
    write_bytes_atomic(path, text.encode("utf-8"), fsync=fsync)


def write_json_atomic(path: Path, obj: Any, *, fsync: bool = False) -> None:
    """Write ``obj`` as indented UTF-8 JSON to ``path`` atomically.

    Keys keep their insertion order (the writer's order is the most readable one).
    """
    write_text_atomic(path, json.dumps(obj, indent=2, ensure_ascii=False) + "\n", fsync=fsync)


def link_or_copy(src: Path, dest: Path) -> str:
    """Make ``dest`` hold the content of ``src``; return ``"link"`` or ``"copy"``.

    A hard link costs no space or time; where the filesystem refuses one (another device, no
    hard-link support, too many links) the file is copied. Either way ``dest`` is replaced
    atomically and never seen half-made.

    Raises:
        FileNotFoundError: ``src`` does not exist.
    """
    dest.parent.mkdir(parents=True, exist_ok=True)
    tmp = _temp_path(dest)
    try:
        os.link(src, tmp)
    except FileNotFoundError:
        raise
    except OSError:
        with open(src, "rb") as inp, atomic_write(dest) as out:
            shutil.copyfileobj(inp, out, 1 << 20)
        return "copy"
    try:
        os.replace(tmp, dest)
    finally:
        # rename(2) does nothing when both names already link to one file, leaving tmp behind.
        with suppress(FileNotFoundError):
            os.unlink(tmp)
    return "link"


def remove_partials(folder: Path) -> int:
    """Delete the temporary files of writers that were killed; only call when no writer is left."""
    removed = 0
    for leftover in folder.rglob(".*.part"):
        with suppress(FileNotFoundError):
            leftover.unlink()
            removed += 1
    return removed


def sha256_file(path: Path) -> str:
    """Hex SHA-256 of the file at ``path``."""
    digest = hashlib.sha256()
    with open(path, "rb") as f:
        while block := f.read(1 << 20):
            digest.update(block)
    return digest.hexdigest()
