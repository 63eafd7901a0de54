"""Writing output files (artifacts) safely: one policy for every writer of the package.

Traces, step pages, plots (PNG/SVG), Verilog, VCD waveforms and sweep exports all go
through :func:`open_artifact` (or :func:`write_text` / :func:`write_bytes`), so they
behave alike:

* the path must be non-empty; an empty path is an error, not a silent no-op;
* an absent path or an existing **regular file** is written atomically: the data goes to
  a temporary file in the same directory, is flushed to disk and then renamed over the
  target (:func:`os.replace`), so a crash or an error never leaves half a file, and a
  replaced file keeps its permission bits (a new one gets ``0666 & ~umask``, as ``open``
  would give it);
* a **symlink** is written *through*: its final target (``os.path.realpath``) is the file
  written atomically, under the same rules, and the link itself stays a link. (Replacing
  the link with a regular file would silently detach whatever else points at the target.)
* anything else (a directory, a FIFO, a character or block device such as ``/dev/full``, a
  socket) is refused with one sentence and never touched: renaming over a device node or
  a FIFO would destroy it, and writing into one is not an atomic file write;
* every error is a :class:`~systolic.errors.SystolicError` naming the path the user gave,
  never the temporary file.

:func:`check_artifact_path` runs the same checks without writing, so a command can refuse
a bad ``--trace`` / ``-o`` before it does the work.
"""

from __future__ import annotations

import contextlib
import os
import stat
import tempfile
from collections.abc import Iterator
from pathlib import Path
from typing import IO, Any, Literal, overload

from .errors import SystolicError

__all__ = ["ArtifactError", "check_artifact_path", "open_artifact", "write_bytes",
           "write_text", "wrote_line"]


def wrote_line(path: str | os.PathLike[str], what: str) -> str:
    """The one wording of "a file was written" (issue 22): ``wrote FILE (what)``, ``what``
    saying what the file holds, so every command and tool reports a file alike."""
    return f"wrote {os.fspath(path)} ({what})"


class ArtifactError(SystolicError, OSError):
    """An output path that cannot or must not be written. Also an OSError, so code that
    handles failed writes as OSError keeps working; the message names the user's path."""


def _kind(mode: int) -> str | None:
    """What a non-regular file is, in words (None for a regular file)."""
    for test, name in ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
                       (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
                       (stat.S_ISSOCK, "a socket")):
        if test(mode):
            return name
    return None if stat.S_ISREG(mode) else "not a regular file"


def check_artifact_path(path: str | os.PathLike[str], what: str = "output") -> Path:
    """The file that writing ``path`` would replace (a symlink's final target), after the
    checks of the module docstring; raises :class:`ArtifactError` naming ``path``."""
    name = os.fspath(path)
    if name == "":
        raise ArtifactError(f"the {what} path is empty; give a file name")
    target = Path(os.path.realpath(name)) if os.path.islink(name) else Path(name)
    try:
        st = os.stat(target)
    except FileNotFoundError:
        st = None
    except OSError as exc:
        raise ArtifactError(f"{name}: cannot write the {what}: {exc.strerror}") from None
    if st is not None:
        kind = _kind(st.st_mode)
        if kind is not None:
            via = "" if str(target) == name else f" (the link points to {target})"
            raise ArtifactError(f"{name}: is {kind}{via}; the {what} is written only to a "
                                f"regular file or a new path")
    parent = target.parent
    if not parent.is_dir():
        raise ArtifactError(f"{name}: cannot write the {what}: the folder {parent} does not "
                            f"exist")
    return target


@overload
def open_artifact(path: str | os.PathLike[str], what: str = ..., *,
                  binary: Literal[False] = ...) -> contextlib.AbstractContextManager[IO[str]]: ...
@overload
def open_artifact(path: str | os.PathLike[str], what: str = ..., *,
                  binary: Literal[True]) -> contextlib.AbstractContextManager[IO[bytes]]: ...
def open_artifact(path: str | os.PathLike[str], what: str = "output", *,
                  binary: bool = False) -> contextlib.AbstractContextManager[Any]:
    """A context manager yielding a file object to write ``path``'s new content into; on a
    clean exit the content replaces ``path`` atomically, on an exception nothing changes.
    ``what`` names the artifact in errors ("trace", "plot", ...)."""
    return _open(path, what, binary)


@contextlib.contextmanager
def _open(path: str | os.PathLike[str], what: str, binary: bool) -> Iterator[Any]:
    name = os.fspath(path)
    target = check_artifact_path(name, what)
    try:
        fd, tmp = tempfile.mkstemp(dir=target.parent, prefix=f".{target.name}.",
                                   suffix=".tmp")
    except OSError as exc:
        raise ArtifactError(f"{name}: cannot write the {what}: {exc.strerror}") from None
    try:
        try:
            mode = stat.S_IMODE(os.stat(target).st_mode)
        except FileNotFoundError:
            umask = os.umask(0)
            os.umask(umask)
            mode = 0o666 & ~umask
        os.fchmod(fd, mode)  # mkstemp makes 0600; keep what the user would get from open()
        f: IO[Any] = os.fdopen(fd, "wb") if binary else os.fdopen(fd, "w", encoding="utf-8")
        with f:
            yield f
            f.flush()
            os.fsync(f.fileno())
        # The target may have changed kind since the check (a race): check again, then swap.
        check_artifact_path(name, what)
        os.replace(tmp, target)
    except OSError as exc:
        Path(tmp).unlink(missing_ok=True)
        raise ArtifactError(f"{name}: cannot write the {what}: {exc.strerror or exc}") from None
    except BaseException:
        Path(tmp).unlink(missing_ok=True)
        raise


def write_text(path: str | os.PathLike[str], text: str, what: str = "output") -> Path:
    """Write ``text`` (UTF-8) to ``path`` under the module's rules; returns ``path``."""
    with open_artifact(path, what) as f:
        f.write(text)
    return Path(path)


def write_bytes(path: str | os.PathLike[str], data: bytes, what: str = "output") -> Path:
    """Write ``data`` to ``path`` under the module's rules; returns ``path``."""
    with open_artifact(path, what, binary=True) as f:
        f.write(data)
    return Path(path)
