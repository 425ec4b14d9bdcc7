"""Write only what we create: the one way every workbench writer opens a file (never
through a link: ``LinkRefused``; docs/security.md, "Run ids and paths").
"""

from __future__ import annotations

import contextlib
import errno
import os
import stat
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal

from workbench.errors import ConfigError, OutputWriteError

__all__ = ["LinkRefused", "commit", "make_dir", "open_fd", "open_file", "temp_of",
           "write_atomic", "write_fd", "write_file"]

NOFOLLOW = getattr(os, "O_NOFOLLOW", 0)
CLOEXEC = getattr(os, "O_CLOEXEC", 0)
TMP_SUFFIX = ".tmp"


class LinkRefused(ConfigError):
    """A link (symbolic, or a second hard link) where workbench was to write a file."""

    def __init__(self, path: str | os.PathLike[str], what: str = "a symbolic link") -> None:
        self.path = str(path)
        super().__init__(f"{path}: {what} where workbench writes a file: refused, nothing "
                         "written through it (remove it, or write elsewhere)")


def _clear(path: Path) -> None:
    """Make room for a new file at ``path``: a file of ours removed, a link refused."""
    try:
        st = os.lstat(path)
    except FileNotFoundError:
        return
    if stat.S_ISLNK(st.st_mode):
        raise LinkRefused(path)
    if stat.S_ISREG(st.st_mode) and st.st_nlink > 1:
        raise LinkRefused(path, "a file with another hard link")
    if stat.S_ISDIR(st.st_mode):
        raise IsADirectoryError(errno.EISDIR, os.strerror(errno.EISDIR), str(path))
    os.unlink(path)


def open_fd(path: str | os.PathLike[str], *, append: bool = False, mode: int = 0o644) -> int:
    """A descriptor for writing a new file at ``path``, or with ``append`` its end."""
    p = Path(path)
    if not append:
        _clear(p)
    try:
        fd = os.open(p, os.O_WRONLY | os.O_CREAT | NOFOLLOW | CLOEXEC
                     | (os.O_APPEND if append else os.O_EXCL), mode)
    except FileExistsError:  # planted between the check and the create
        raise LinkRefused(p, "a file that appeared while it was being created") from None
    except OSError as exc:
        if exc.errno == errno.ELOOP:
            raise LinkRefused(p) from None
        raise
    if append and os.fstat(fd).st_nlink > 1:
        os.close(fd)
        raise LinkRefused(p, "a file with another hard link")
    return fd


def make_dir(path: str | os.PathLike[str], *, parents: bool = False) -> Path:
    """``path`` as a directory of its own (created if missing); a symbolic link there is
    refused (``O_NOFOLLOW`` guards a file's last component only)."""
    p = Path(path)
    p.mkdir(parents=parents, exist_ok=True)
    if p.is_symlink():
        raise LinkRefused(p, "a symbolic link to a folder")
    return p


def temp_of(path: str | os.PathLike[str]) -> Path:
    """The temporary a file is written to before it is renamed into place."""
    p = Path(path)
    return p.with_name(p.name + TMP_SUFFIX)


def commit(tmp: str | os.PathLike[str], path: str | os.PathLike[str]) -> None:
    """Rename a written temporary over ``path``, unless ``path`` is a link."""
    if os.path.islink(path):
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise LinkRefused(path)
    os.replace(tmp, path)


def write_fd(fd: int, data: bytes, path: str | os.PathLike[str]) -> None:
    """All of ``data`` to ``fd``; a failure empties the file (``OutputWriteError``)."""
    view = memoryview(data)
    try:
        while view:
            view = view[os.write(fd, view) :]
    except OSError as exc:
        with contextlib.suppress(OSError):
            os.ftruncate(fd, 0)
        raise OutputWriteError(path, exc) from None


def write_atomic(path: str | os.PathLike[str], data: bytes) -> Path:
    """``data`` as the whole of ``path``, through ``temp_of(path)`` renamed into place
    (``OutputWriteError``, no temporary left, on a failure)."""
    target = Path(path)
    tmp = temp_of(target)
    try:
        fd = open_fd(tmp)
    except OSError as exc:
        raise OutputWriteError(tmp, exc) from None
    try:
        write_fd(fd, data, tmp)
    except OutputWriteError:
        with contextlib.suppress(OSError):
            os.unlink(tmp)
        raise
    finally:
        os.close(fd)
    try:
        commit(tmp, target)
    except OSError as exc:
        raise OutputWriteError(target, exc) from None
    return target


@contextlib.contextmanager
def open_file(path: str | os.PathLike[str], mode: Literal["w", "wb", "a", "ab"] = "wb", *,
              atomic: bool = False, encoding: str = "utf-8") -> Iterator[IO[Any]]:
    """A file object for writing ``path``; ``atomic``: renamed into place when the block
    ends without an error."""
    target = Path(path)
    where = temp_of(target) if atomic else target
    fd = open_fd(where, append=mode.startswith("a"))
    fh: IO[Any] = (os.fdopen(fd, mode) if mode.endswith("b")
                   else os.fdopen(fd, mode, encoding=encoding, newline=""))
    try:
        with fh:
            yield fh
    except BaseException:
        if atomic:
            with contextlib.suppress(OSError):
                os.unlink(where)
        raise
    if atomic:
        commit(where, target)


def write_file(path: str | os.PathLike[str], data: bytes | str, *, atomic: bool = True) -> Path:
    """``data`` as the whole of ``path`` (text as UTF-8), by ``open_file``."""
    raw = data.encode("utf-8") if isinstance(data, str) else data
    with open_file(path, "wb", atomic=atomic) as fh:
        fh.write(raw)
    return Path(path)
