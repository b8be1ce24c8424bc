"""pipeline.storage: paths that stay under the root, writes that are all or nothing."""

from __future__ import annotations

import errno
import hashlib
import json
import os
import threading
from pathlib import Path

import pytest

from pipeline import storage
from pipeline.errors import UnsafePath
from pipeline.storage import (
    atomic_write,
    link_or_copy,
    safe_join,
    sha256_file,
    write_bytes_atomic,
    write_json_atomic,
    write_text_atomic,
)


def files_in(folder: Path) -> list[str]:
    return sorted(str(p.relative_to(folder)) for p in folder.rglob("*") if not p.is_dir())


# --- safe_join --------------------------------------------------------------------------------


@pytest.mark.parametrize(
    "relative",
    ["../x", "/abs", "/", "a/../../b", "a/..", "..", "a/b/../../..", "a\\..\\b", "a\x00b", "", ".", "./"],
)
def test_safe_join_refuses(tmp_path: Path, relative: str) -> None:
    with pytest.raises(UnsafePath):
        safe_join(tmp_path, relative)


@pytest.mark.parametrize(
    ("relative", "parts"),
    [
        ("run/de/example.com.html", ("run", "de", "example.com.html")),
        ("./a//b/", ("a", "b")),
        ("a/..b/c..", ("a", "..b", "c..")),  # dots inside names are fine
    ],
)
def test_safe_join_accepts(tmp_path: Path, relative: str, parts: tuple[str, ...]) -> None:
    assert safe_join(tmp_path, relative) == tmp_path.resolve().joinpath(*parts)


def test_safe_join_refuses_a_symlink_leading_outside(tmp_path: Path) -> None:
    root, outside = tmp_path / "root", tmp_path / "outside"
    root.mkdir()
    outside.mkdir()
    (root / "escape").symlink_to(outside)
    (root / "file-escape").symlink_to(outside / "secret")
    for relative in ("escape/page.html", "escape", "file-escape"):
        with pytest.raises(UnsafePath):
            safe_join(root, relative)


def test_safe_join_allows_a_symlink_staying_inside(tmp_path: Path) -> None:
    (tmp_path / "real").mkdir()
    (tmp_path / "alias").symlink_to(tmp_path / "real")
    assert safe_join(tmp_path, "alias/page.html") == tmp_path.resolve() / "alias" / "page.html"


def test_safe_join_with_a_relative_root(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    monkeypatch.chdir(tmp_path)
    assert safe_join(Path("downloads"), "x/y.html") == tmp_path.resolve() / "downloads" / "x" / "y.html"


# --- atomic writes ----------------------------------------------------------------------------


def test_atomic_write_creates_folders_and_writes(tmp_path: Path) -> None:
    target = tmp_path / "a" / "b" / "page.html"
    with atomic_write(target) as out:
        out.write(b"hello ")
        out.write(b"world")
        assert not target.exists()  # nothing under the final name until the block ends
    assert target.read_bytes() == b"hello world"
    assert files_in(tmp_path) == ["a/b/page.html"]


def test_atomic_write_leaves_nothing_on_error(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    with pytest.raises(RuntimeError), atomic_write(target) as out:
        out.write(b"half a page")
        raise RuntimeError("network went away")
    assert files_in(tmp_path) == []


def test_atomic_write_keeps_the_old_file_on_error(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_bytes(b"old")
    with pytest.raises(KeyboardInterrupt), atomic_write(target, fsync=True) as out:
        out.write(b"new")
        raise KeyboardInterrupt
    assert target.read_bytes() == b"old"
    assert files_in(tmp_path) == ["page.html"]


def test_atomic_write_replaces_and_fsyncs(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    target.write_bytes(b"old")
    with atomic_write(target, fsync=True) as out:
        out.write(b"new")
    assert target.read_bytes() == b"new"


def test_atomic_write_temp_file_is_hidden_and_marked(tmp_path: Path) -> None:
    target = tmp_path / ("x" * 250)  # a long name must not overflow the temp name
    with atomic_write(target) as out:
        (temp,) = [p for p in tmp_path.iterdir()]
        assert temp.name.startswith(".") and temp.name.endswith(".part")
        assert len(temp.name) < 255
        out.write(b"x")
    assert files_in(tmp_path) == [target.name]


def test_atomic_write_concurrent_writers_never_mix(tmp_path: Path) -> None:
    target = tmp_path / "page.html"
    contents = [bytes([i]) * 100_000 for i in range(8)]
    threads = [threading.Thread(target=write_bytes_atomic, args=(target, c)) for c in contents]
    for t in threads:
        t.start()
    for t in threads:
        t.join()
    assert target.read_bytes() in contents
    assert files_in(tmp_path) == ["page.html"]


def test_write_helpers(tmp_path: Path) -> None:
    write_bytes_atomic(tmp_path / "b.bin", b"\x00\x01")
    write_text_atomic(tmp_path / "t.txt", "caf\xe9")
    write_json_atomic(tmp_path / "j" / "r.json", {"z": 1, "a": ["\u20ac"]})
    assert (tmp_path / "b.bin").read_bytes() == b"\x00\x01"
    assert (tmp_path / "t.txt").read_bytes() == "caf\xe9".encode()
    text = (tmp_path / "j" / "r.json").read_text(encoding="utf-8")
    assert json.loads(text) == {"z": 1, "a": ["\u20ac"]}
    assert text.index('"z"') < text.index('"a"') and "\u20ac" in text and text.endswith("}\n")


def test_write_json_atomic_unserialisable_leaves_nothing(tmp_path: Path) -> None:
    with pytest.raises(TypeError):
        write_json_atomic(tmp_path / "r.json", {"x": object()})
    assert files_in(tmp_path) == []


# --- link_or_copy and hashing -----------------------------------------------------------------


def test_link_or_copy_links(tmp_path: Path) -> None:
    src = tmp_path / "src.html"
    src.write_bytes(b"page")
    dest = tmp_path / "de" / "x.html"
    assert link_or_copy(src, dest) == "link"
    assert dest.read_bytes() == b"page"
    assert os.path.samefile(src, dest)
    # Again, over an existing link to the same file: no temp file may stay behind.
    assert link_or_copy(src, dest) == "link"
    assert files_in(tmp_path) == ["de/x.html", "src.html"]


def test_link_or_copy_replaces_another_file(tmp_path: Path) -> None:
    src, dest = tmp_path / "src.html", tmp_path / "dest.html"
    src.write_bytes(b"new")
    dest.write_bytes(b"old")
    assert link_or_copy(src, dest) == "link"
    assert dest.read_bytes() == b"new"


def test_link_or_copy_copies_when_links_are_refused(tmp_path: Path, monkeypatch: pytest.MonkeyPatch) -> None:
    def refuse(src: object, dest: object) -> None:
        raise OSError(errno.EXDEV, "Invalid cross-device link")

    monkeypatch.setattr(storage.os, "link", refuse)
    src = tmp_path / "src.html"
    src.write_bytes(b"page" * 100_000)
    dest = tmp_path / "it" / "x.html"
    assert link_or_copy(src, dest) == "copy"
    assert dest.read_bytes() == src.read_bytes()
    assert not os.path.samefile(src, dest)
    assert files_in(tmp_path) == ["it/x.html", "src.html"]


def test_link_or_copy_missing_source(tmp_path: Path) -> None:
    with pytest.raises(FileNotFoundError):
        link_or_copy(tmp_path / "nope", tmp_path / "dest")
    assert files_in(tmp_path) == []


def test_sha256_file(tmp_path: Path) -> None:
    data = os.urandom(3 * 1024 * 1024 + 7)
    (tmp_path / "f").write_bytes(data)
    assert sha256_file(tmp_path / "f") == hashlib.sha256(data).hexdigest()
    (tmp_path / "empty").write_bytes(b"")
    assert sha256_file(tmp_path / "empty") == hashlib.sha256(b"").hexdigest()
