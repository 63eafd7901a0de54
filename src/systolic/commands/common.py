"""Argument types and small helpers shared by the subcommands."""

from __future__ import annotations

import argparse
import contextlib
import sys
from collections.abc import Callable, Iterator
from typing import Any

from ..errors import SystolicError


def positive_int(text: str) -> int:
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if value < 1:
        raise argparse.ArgumentTypeError(f"{value} must be at least 1")
    return value


def positive_seconds(text: str) -> float:
    """A finite number of seconds above 0 (time limits and timeouts)."""
    try:
        value = float(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not a number of seconds") from None
    if not 0 < value < float("inf"):
        raise argparse.ArgumentTypeError(f"{text} must be a number of seconds above 0")
    return value


def bounded_int(limit: int, what: str) -> Callable[[str], int]:
    """A positive int of at most ``limit`` (``what`` names the bound in the error)."""
    def parse(text: str) -> int:
        value = positive_int(text)
        if value > limit:
            raise argparse.ArgumentTypeError(f"{value} is more than {limit:,} ({what})")
        return value

    return parse


# matplotlib refuses images of 2^23 pixels a side; far below that a PNG is already hundreds
# of megabytes, so plots stop at 16,384 pixels a side
MAX_PLOT_PX = 16_384


def add_json(p: argparse.ArgumentParser) -> None:
    p.add_argument("--json", action="store_true", help="print one JSON object for scripts")


def add_output_args(p: argparse.ArgumentParser) -> None:
    p.add_argument("--trace", metavar="FILE.json", type=output_path("trace"),
                   help="write a Chrome/Perfetto trace: one row per engine and DMA queue")
    p.add_argument("--timeline", metavar="FILE.png", type=plot_path,
                   help="plot the same rows over time (PNG or SVG)")
    add_plot_size(p, "timeline 520")


# The width of every plot when --width is not given.
PLOT_WIDTH = 1200


def add_plot_size(p: argparse.ArgumentParser, height: str) -> None:
    """--width / --height of a command's plots, the same on every plotting command (None
    when not given, so a command can refuse them without a plot: :func:`check_plot_size`)."""
    size = bounded_int(MAX_PLOT_PX, "the largest plot side")
    p.add_argument("--width", type=size, metavar="PX",
                   help=f"plot width in pixels ({PLOT_WIDTH})")
    p.add_argument("--height", type=size, metavar="PX",
                   help=f"plot height in pixels ({height})")


def check_plot_size(args: argparse.Namespace, plots: str, present: bool) -> None:
    """Refuse --width / --height when no plot is asked for (``plots`` names the options)."""
    for opt in ("width", "height"):
        refuse_alone(getattr(args, opt, None) is not None, f"--{opt}", plots, present)


def plot_path(text: str) -> str:
    """An argparse type for a .png / .svg output, checked before the work."""
    from ..views.plots import check_plot_path

    try:
        check_plot_path(text)
    except SystolicError as exc:
        raise argparse.ArgumentTypeError(str(exc)) from None
    return text


@contextlib.contextmanager
def progress_bar(description: str, total: int | None = None, *, enabled: bool = True,
                 forced: bool = False) -> Iterator[Callable[[int], None]]:
    """A rich progress bar on stderr (only on a terminal, when ``enabled``); yields
    ``advance(n)``. ``forced`` (--progress) writes a line at the start and one at the end
    instead, terminal or not."""
    if forced:
        count = [0]

        def add(n: int) -> None:
            count[0] += n

        with stage(description, argparse.Namespace(progress=True)):
            yield add
        sys.stderr.write(f"systolic: {description}: {count[0]:,}"
                         f"{'' if total is None else f' of {total:,}'}\n")
        return
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


def seed(text: str) -> int:
    """A random seed: numpy's generators take 0 .. 2**128 - 1."""
    try:
        value = int(text)
    except ValueError:
        raise argparse.ArgumentTypeError(f"{text!r} is not an integer") from None
    if not 0 <= value < 2**128:
        raise argparse.ArgumentTypeError(f"{value} is not a seed; use 0 .. 2**128 - 1")
    return value


def output_path(what: str) -> Callable[[str], str]:
    """An argparse type for an output file: refused now (before the work) when empty or
    not writable under :mod:`systolic.artifacts`' rules."""
    def check(text: str) -> str:
        # imported when a path is given, not when the parser is built: a command run
        # without --trace does not load the artifact rules (start-up, issue 20)
        from ..artifacts import check_artifact_path

        try:
            check_artifact_path(text, what)
        except SystolicError as exc:
            raise argparse.ArgumentTypeError(str(exc)) from None
        return text

    check.__name__ = what  # argparse names the type in its messages
    return check


def dtype_name(text: str) -> str:
    """Format names are case-insensitive, as in workload files (``BF16`` is ``bf16``)."""
    return text.lower()


def arch_name(text: str) -> str:
    """Arch preset names are case-insensitive too, as in workload files (``TRN2``)."""
    return text.lower()


def add_arch(p: argparse.ArgumentParser, help: str, default: str | None = "trn2") -> None:
    """--arch, the same on every command: any case, one of the presets."""
    from ..arch import ARCHS

    p.add_argument("--arch", default=default, type=arch_name, choices=list(ARCHS),
                   metavar="ARCH", help=f"{help}: {', '.join(ARCHS)}, any case")


def html_path(text: str) -> str:
    """An argparse type for a .html output, refused by its suffix before the work, as the
    plot paths are (a page written to ``x.png`` opens as a broken image)."""
    from pathlib import Path

    if text and Path(text).suffix.lower() not in (".html", ".htm"):  # "" is refused below
        raise argparse.ArgumentTypeError(f"{text}: a step page is HTML; name the file "
                                         f".html")
    return output_path("step page")(text)


def refuse_alone(given: bool, option: str, needs: str, present: bool) -> None:
    """An option that does nothing without another is refused (issue 22): a --width with no
    plot to size was silently ignored."""
    if given and not present:
        raise SystolicError(f"{option} does nothing without {needs}")


def wrote(path: str, what: str, *, json_mode: bool = False) -> None:
    """Say that a file was written, in one wording everywhere: ``wrote FILE (what)``, on
    stdout with a table, on stderr under --json (so the JSON stays the only thing on
    stdout)."""
    from ..artifacts import wrote_line

    print(wrote_line(path, what), file=sys.stderr if json_mode else sys.stdout)


def file_size(path: str) -> str:
    """The size of a written file in words (``416.2 MB``), for the ``wrote`` line."""
    import os

    size = os.path.getsize(path)
    for unit, scale in (("GB", 1e9), ("MB", 1e6), ("kB", 1e3)):
        if size >= scale:
            return f"{size / scale:,.1f} {unit}"
    return f"{size} bytes"


def add_progress(p: argparse.ArgumentParser) -> None:
    p.add_argument("--progress", action="store_true",
                   help="report each stage of long work on stderr even when it is not a "
                        "terminal (on a terminal it is shown anyway, except under --json)")


@contextlib.contextmanager
def stage(description: str, args: argparse.Namespace) -> Iterator[None]:
    """One stage of long work reported on stderr (never stdout, so --json stays clean): a
    transient spinner on a terminal (not under --json), a line and its time with
    --progress; nothing otherwise."""
    import time

    forced = bool(getattr(args, "progress", False))
    if forced:
        t0 = time.perf_counter()
        sys.stderr.write(f"systolic: {description} ...\n")
        sys.stderr.flush()
        yield
        sys.stderr.write(f"systolic: {description}: done in {time.perf_counter() - t0:.1f} s\n")
        return
    if getattr(args, "json", False) or not sys.stderr.isatty():
        yield
        return
    with _stderr_console().status(description):
        yield


def print_rich(*renderables: Any) -> None:
    """Print rich tables and text without cutting a cell or a line (the width is what the
    widest renderable needs, or the terminal's if wider) and without trailing spaces. Text
    counts too: piped, a sweep's failure line was wrapped at 40 columns, so a script reading
    one error per line got pieces of it."""
    from rich.console import Console
    from rich.text import Text

    con = Console(highlight=False)
    wide = con.options.update_width(10_000)  # measure what a table needs, uncut
    need = max((con.measure(Text.from_markup(r) if isinstance(r, str) else r,
                            options=wide).maximum for r in renderables), default=0)
    out = Console(highlight=False, width=max(need, con.width if con.is_terminal else 0, 40),
                  force_terminal=con.is_terminal)
    with out.capture() as cap:
        for r in renderables:
            out.print(r)
    sys.stdout.write("".join(line.rstrip() + "\n" for line in cap.get().splitlines()))
