"""A line-aware YAML reader: every error names the file and the line of the node.

Shared by the workload files (:mod:`systolic.workload`) and the sweep files
(:mod:`systolic.sweep`), so both check their input the same way.
"""

from __future__ import annotations

import os
import stat
from collections.abc import Sequence
from typing import Any

import yaml
from yaml.constructor import SafeConstructor

from .errors import SystolicError, WorkloadError

__all__ = ["MAX_FILE_BYTES", "YamlSource", "compose", "one_line", "read_text"]


class YamlSource:
    """Reads YAML nodes and raises one-line errors that name the file and the line of a
    node, as ``error_type`` (a SystolicError subclass: WorkloadError, SweepError, ...)."""

    def __init__(self, path: str, error_type: type[SystolicError] = WorkloadError) -> None:
        self.path = path
        self.error_type = error_type
        self._construct = SafeConstructor()

    def fail(self, node_or_line: yaml.Node | int, message: str) -> SystolicError:
        line = (node_or_line if isinstance(node_or_line, int)
                else node_or_line.start_mark.line + 1)
        return self.error_type(f"{self.path}:{line}: {message}")

    def scalar(self, node: yaml.Node) -> Any:
        if not isinstance(node, yaml.ScalarNode):
            raise self.fail(node, f"expected a single value, got a "
                                  f"{'list' if isinstance(node, yaml.SequenceNode) else 'mapping'}")
        try:
            return self._construct.construct_object(node, deep=True)
        except yaml.constructor.ConstructorError as exc:  # e.g. an unknown !!tag
            raise self.fail(node, f"bad value {node.value!r}: {one_line(exc.problem)}; "
                                  f"write plain values (no YAML tags)") from None
        except yaml.YAMLError as exc:
            raise self.fail(node, f"bad value {node.value!r}: {one_line(str(exc))}") from None

    def mapping(self, node: yaml.Node, what: str, allowed: Sequence[str]
                ) -> dict[str, tuple[Any, yaml.Node]]:
        """A mapping's keys (each allowed, none repeated) -> (value node, key node)."""
        if not isinstance(node, yaml.MappingNode):
            raise self.fail(node, f"{what} must be a mapping of keys to values")
        out: dict[str, tuple[Any, yaml.Node]] = {}
        for key_node, value_node in node.value:
            key = self.scalar(key_node)
            if key not in allowed:
                raise self.fail(key_node, f"unknown key {key!r} in {what}; expected one of "
                                          f"{', '.join(allowed)}")
            if key in out:
                raise self.fail(key_node, f"key {key!r} appears twice in {what}")
            out[key] = (value_node, key_node)
        return out


#: The largest spec file read (4 MiB): a workload or a sweep is a short list of a few
#: hundred bytes; a file past this is a mistake (a log, a tensor dump), not a spec.
MAX_FILE_BYTES = 1 << 22

_KINDS = ((stat.S_ISDIR, "a directory"), (stat.S_ISFIFO, "a FIFO (named pipe)"),
          (stat.S_ISCHR, "a character device"), (stat.S_ISBLK, "a block device"),
          (stat.S_ISSOCK, "a socket"))


def read_text(path: str | os.PathLike[str], what: str,
              error_type: type[SystolicError] = WorkloadError, *,
              max_bytes: int = MAX_FILE_BYTES, hint: str = "") -> tuple[str, str]:
    """``(name, text)`` of a UTF-8 spec file, the one rule for every file the tool reads
    as a spec. One that cannot be read raises ``error_type`` with one line
    ``NAME: cannot read the WHAT: reason``; one that is not a regular file is refused (a
    FIFO with no writer would block the open forever, ``/dev/zero`` would be read until
    memory runs out), and so is one past ``max_bytes`` (``hint`` says what the file
    should hold). The file is opened without blocking and checked on the open descriptor,
    so a path swapped for a FIFO between a check and the open cannot block either."""
    name = os.fspath(path)
    try:
        fd = os.open(name, os.O_RDONLY | getattr(os, "O_NONBLOCK", 0))
    except OSError as exc:
        raise error_type(f"{name}: cannot read the {what}: {exc.strerror}") from None
    except ValueError:  # a NUL byte in the path: no file has that name
        raise error_type(f"{name!r}: cannot read the {what}: the path holds a NUL "
                         f"byte") from None
    try:
        mode = os.fstat(fd).st_mode
        if not stat.S_ISREG(mode):
            kind = next((k for test, k in _KINDS if test(mode)), "not a regular file")
            raise error_type(f"{name}: is {kind}; a {what} is read only from a regular file")
        with os.fdopen(os.dup(fd), "rb") as f:
            data = f.read(max_bytes + 1)  # a file growing as it is read stops here too
    except OSError as exc:
        raise error_type(f"{name}: cannot read the {what}: {exc.strerror}") from None
    finally:
        os.close(fd)
    if len(data) > max_bytes:
        raise error_type(f"{name}: is more than {max_bytes:,} bytes; "
                         f"{hint or f'a {what} is a short text file'}")
    try:
        return name, data.decode("utf-8")
    except UnicodeDecodeError as exc:
        raise error_type(f"{name}: cannot read the {what}: {exc}") from None


def compose(src: YamlSource, text: str, levels: str) -> yaml.Node | None:
    """The root node of ``text`` (None when it is empty); a syntax error, a character YAML
    forbids, or nesting too deep for the parser raises ``src``'s error on the line it is
    on. ``levels`` says how deep the file needs to go (for the too-deep message)."""
    try:
        return yaml.compose(text, Loader=yaml.SafeLoader)
    except yaml.MarkedYAMLError as exc:
        mark = exc.problem_mark or exc.context_mark
        line = mark.line + 1 if mark is not None else 1
        raise src.fail(line, f"YAML syntax error: "
                             f"{one_line(exc.problem or exc.context)}") from None
    except yaml.reader.ReaderError as exc:  # a NUL byte or another control character
        line = text.count("\n", 0, exc.position) + 1
        char = exc.character if isinstance(exc.character, int) else ord(exc.character)
        raise src.fail(line, f"character #x{char:04x} is not allowed in YAML "
                             f"(position {exc.position}); remove it") from None
    except yaml.YAMLError as exc:
        raise src.fail(1, f"YAML error: {one_line(str(exc))}") from None
    except RecursionError:  # nesting a caller's bracket count missed (block style, anchors)
        raise src.fail(1, f"the YAML is nested too deeply to read; {levels}") from None


def one_line(text: str | None) -> str:
    """``text`` with every run of whitespace (newlines included) as one space."""
    return " ".join((text or "").split())
