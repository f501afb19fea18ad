"""Atomic output files: a reader sees the old file or the whole new one, never part."""

from __future__ import annotations

import os
import tempfile
from pathlib import Path

from .errors import OnnxmemError

__all__ = ["check_output_path", "write_bytes_atomic", "write_text_atomic"]


def check_output_path(path: str | os.PathLike[str], what: str = "output") -> Path:
    """Fail early, before any work, when ``path`` cannot be written."""
    p = Path(path)
    parent = p.parent if str(p.parent) else Path(".")
    if not parent.is_dir():
        raise OnnxmemError(
            f"{what} path '{p}': folder '{parent}' does not exist; create it or "
            "choose another path"
        )
    if p.is_dir():
        raise OnnxmemError(f"{what} path '{p}' is a folder; give a file name")
    return p


def write_bytes_atomic(path: str | os.PathLike[str], data: bytes) -> None:
    p = check_output_path(path)
    fd, tmp = tempfile.mkstemp(prefix=f".{p.name}.", suffix=".tmp", dir=p.parent or ".")
    try:
        with os.fdopen(fd, "wb") as fh:
            fh.write(data)
            fh.flush()
            os.fsync(fh.fileno())
        # mkstemp creates 0600; give the file the mode an ordinary open() would
        umask = os.umask(0)
        os.umask(umask)
        os.chmod(tmp, 0o666 & ~umask)
        os.replace(tmp, p)
    except BaseException:
        try:
            os.unlink(tmp)
        except OSError:
            pass
        raise


def write_text_atomic(path: str | os.PathLike[str], text: str) -> None:
    write_bytes_atomic(path, text.encode("utf-8"))
