"""Reading the files a run names (scenarios, traces, pass tables, model configs): opened only
when they are regular files, so a FIFO or a device never blocks a run for ever, and their
SHA-256, recorded in a run's folder so that a rerun can say which input is missing or changed.

Part of :mod:`simkit.core`: the standard library only.
"""

from __future__ import annotations

import hashlib
import io
import os
import stat
from typing import IO, Optional

__all__ = ["NotRegularFile", "NotUtf8", "open_regular", "read_text", "sha256_file"]


class NotRegularFile(OSError):
    """The path names a folder, a FIFO, a socket or a device: not a file to read. Its
    ``strerror`` says which, for a one-line message."""


def _kind(mode: int) -> str:
    """What the file is, as an OS error would say it (capitalised)."""
    if stat.S_ISDIR(mode):
        return "Is a directory"
    if stat.S_ISFIFO(mode):
        return "Is a FIFO (named pipe), not a regular file"
    return "Is not a regular file (a device or a socket)"


def open_regular(path: str, encoding: str = "utf-8", newline: Optional[str] = None,
                 errors: Optional[str] = None) -> IO[str]:
    """``path`` opened for reading as text (``errors``: the decoding error handler, strict by
    default), only if it is a regular file.

    The file is opened without blocking (a FIFO with no writer would otherwise block the
    open for ever) and checked on the open descriptor, so it cannot be swapped in between.

    Raises:
        NotRegularFile: a folder, FIFO, socket or device (``strerror`` says which).
        OSError: the file cannot be opened (missing, no permission...).
    """
    fd = os.open(path, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            raise NotRegularFile(0, _kind(mode), path)
        if hasattr(os, "set_blocking"):
            os.set_blocking(fd, True)
        raw = os.fdopen(fd, "rb")
    except BaseException:
        os.close(fd)
        raise
    return io.TextIOWrapper(raw, encoding=encoding, errors=errors, newline=newline)


class NotUtf8(ValueError):
    """A file holds bytes that UTF-8 does not decode. ``str(error)``: ``PATH:LINE: not UTF-8
    text (reason)``, the line counted from 1 (a caller adds what it expected)."""

    def __init__(self, path: str, line: int, reason: str) -> None:
        super().__init__(f"{path}:{line}: not UTF-8 text ({reason})")
        self.path, self.line, self.reason = path, line, reason


def read_text(path: str, encoding: str = "utf-8") -> str:
    """The whole text of the regular file ``path`` (:func:`open_regular`), decoded as
    ``encoding`` (``utf-8``, or ``utf-8-sig`` to drop a BOM).

    Raises:
        NotRegularFile: a folder, FIFO, socket or device.
        OSError: the file cannot be opened or read.
        NotUtf8: bytes that do not decode, with the line they are on.
    """
    with open_regular(path) as f:
        data = f.buffer.read()
    try:
        return data.decode(encoding)
    except UnicodeDecodeError as exc:
        raise NotUtf8(path, data.count(b"\n", 0, exc.start) + 1, exc.reason) from None


#: (real path, size, mtime_ns, inode) -> SHA-256, so that the points of a sweep or the calls of
#: a notebook hash a large trace once, and an edited file (new size or mtime) again
_HASHES: dict[tuple, str] = {}


def sha256_file(path: str) -> str:
    """The SHA-256 (hex) of the regular file ``path``.

    Raises:
        NotRegularFile: ``path`` is not a regular file.
        OSError: it cannot be read.
    """
    real = os.path.realpath(path)
    st = os.stat(real)
    if not stat.S_ISREG(st.st_mode):
        raise NotRegularFile(0, _kind(st.st_mode), path)
    key = (real, st.st_size, st.st_mtime_ns, st.st_ino)
    digest = _HASHES.get(key)
    if digest is None:
        h = hashlib.sha256()
        with open(real, "rb") as f:
            for chunk in iter(lambda: f.read(1 << 20), b""):
                h.update(chunk)
        digest = _HASHES[key] = h.hexdigest()
    return digest
