"""The project's own exception types.

Every error a user can cause is one of these, with a sentence they can act on. The CLI
prints ``str(error)`` on one line and exits non-zero; nothing leaks a numpy traceback.
"""

from __future__ import annotations


class SystolicError(Exception):
    """Base of every error this package raises on bad input."""


class ArchError(SystolicError):
    """An unknown arch preset, or a feature the generation does not have."""


class FormatError(SystolicError):
    """An unknown format name, or values a format cannot hold."""


class ShapeError(SystolicError):
    """Operands whose shapes do not fit the operation."""


class VerifyError(SystolicError):
    """A Program that breaks a rule of the ISA; ``index`` names the instruction."""

    def __init__(self, index: int, message: str) -> None:
        self.index = index
        self.message = message
        super().__init__(f"instruction {index}: {message}")


class ParseError(SystolicError):
    """Program text that does not parse; ``line`` is 1-based."""

    def __init__(self, line: int, message: str) -> None:
        self.line = line
        self.message = message
        super().__init__(f"line {line}: {message}")


class BundleError(SystolicError):
    """Bytes that are not a valid 64-byte bundle stream; ``offset`` is the byte offset."""

    def __init__(self, offset: int, message: str) -> None:
        self.offset = offset
        self.message = message
        super().__init__(f"byte offset {offset:#x}: {message}")


class WorkloadError(SystolicError):
    """A malformed workload file."""


class SweepError(SystolicError):
    """A malformed sweep file, a results store that cannot be used, or a point that cannot
    run (recorded in the store as a failed point)."""


class KernelError(SystolicError):
    """An NKI kernel that breaks a rule of the hardware or of NKI, reported at the kernel's
    own source line: ``FILE:LINE: what is wrong and what to do``."""

    def __init__(self, path: str, line: int, message: str) -> None:
        self.path = path
        self.line = line
        self.message = message
        super().__init__(f"{path}:{line}: {message}")


class IndirectIndexError(SystolicError):
    """An indirect DMA's index outside the rows of its device-memory table, found when the
    instruction executes (the indices are values in SBUF, unknown until then). Besides the
    message it carries where: ``partition`` (the index tile's partition holding it),
    ``value``, ``rows`` (the table's rows, valid indices 0..rows-1), and the table's first
    byte ``offset``, ``row_step`` bytes between rows and ``itemsize``, so a front end can
    restate it in its own terms."""

    def __init__(self, message: str, *, partition: int, value: int, rows: int, offset: int,
                 row_step: int, itemsize: int) -> None:
        self.partition, self.value, self.rows = partition, value, rows
        self.offset, self.row_step, self.itemsize = offset, row_step, itemsize
        super().__init__(message)
