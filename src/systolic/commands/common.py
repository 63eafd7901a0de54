"""Argument types and small helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object for scripts")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="FILE.json",
                   help="write a Chrome/Perfetto trace: LDWEIGHTS, MATMUL, PSUM read-out rows")
    p.add_argument("--timeline", metavar="FILE.png",
                   help="plot the LDWEIGHTS and MATMUL rows over time (PNG or SVG)")


@contextlib.contextmanager
def progress_bar(description: str, total: int | None = None, *, enabled: bool = True
                 ) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal); yields ``advance(n)``."""
    if not enabled or not sys.stderr.isatty():
        yield lambda n: None
        return
    from rich.progress import BarColumn, Progress, TextColumn, TimeElapsedColumn

    with Progress(TextColumn("{task.description}"), BarColumn(), TextColumn("{task.completed}"),
                  TimeElapsedColumn(), transient=True,
                  console=_stderr_console()) as prog:
        task = prog.add_task(description, total=total)

        def advance(n: int) -> None:
            prog.advance(task, n)

        yield advance


def _stderr_console() -> Any:
    from rich.console import Console

    return Console(stderr=True)
