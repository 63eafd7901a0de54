"""``nki.profile`` and ``nki.benchmark``'s files: the model's own profile where hardware
writes a device profile.

On a NeuronDevice, ``nki.benchmark(save_neff_name=, save_trace_name=)`` and ``nki.profile``
save the compiled kernel (NEFF) and an execution trace (NTFF) that Neuron Explorer opens
(the nki.profile and nki.benchmark API pages; Neuron Explorer's "profile files" page). Both
formats are the Neuron tools' own and not published, so the model writes, at the names
asked for, what it has of each, and says so in the line that reports the file:

* the trace: the whole core's timing of the kernel as Chrome trace-event JSON
  (:func:`systolic.views.trace.write_trace`, what ``systolic kernel --trace`` writes):
  Perfetto and chrome://tracing open it, one row per engine and DMA queue;
* the "NEFF": the kernel's Program in the model's text form (:mod:`systolic.isa.asm`),
  which :meth:`systolic.isa.Program.parse` reads back;
* ``nki.profile``'s ``json_reports/``: one JSON summary per trace (the keys of ``systolic
  kernel --json``'s whole-core view, docs/json.md).

The model is deterministic, so every profiled execution has the same trace. Kernel files
whose tests stat these files or rename them (nki-samples' SD-attention and mamba perf
runs, the attention tutorial's profile mode, test_neuron_profile) run unchanged.
"""

from __future__ import annotations

import json
import os
import sys
from collections.abc import Sequence
from pathlib import Path
from typing import TYPE_CHECKING, Any

from ..artifacts import ArtifactError, check_artifact_path, write_text, wrote_line
from ..errors import SystolicError
from .timing import longest_core, time_cores, timing_fields

if TYPE_CHECKING:
    from ..isa import Program
    from ..timing.core import CoreTiming
    from .build import Recorded

__all__ = ["ProfileOptions", "trace_names", "write_benchmark_files", "write_neff",
           "write_profile", "write_report", "write_trace_file"]

TRACE_WHAT = "the model's Perfetto trace: Chrome trace-event JSON, not NTFF"
NEFF_WHAT = "the model's Program as text (systolic.isa.asm), not a NEFF"
REPORT_WHAT = "the model's profile summary, JSON"


def _say(path: Path | str, what: str) -> None:
    # stderr: a test's or a script's stdout stays its own
    print(wrote_line(path, what), file=sys.stderr)


def write_trace_file(rec: Recorded, core: CoreTiming, program: Program, path: str | Path,
                     kernel: str) -> Path:
    """Write the whole-core trace of ``program`` (timed as ``core``) to ``path``."""
    from ..views.trace import write_trace

    out = write_trace(core, program, path, lines=None if rec.cores else rec.lines,
                      metadata={"kernel": kernel, "format": TRACE_WHAT})
    _say(out, TRACE_WHAT)
    return out


def write_neff(program: Program, path: str | Path) -> Path:
    """Write ``program``'s text form to ``path``."""
    out = write_text(path, program.text() + "\n", "compiled kernel")
    _say(out, NEFF_WHAT)
    return out


def write_report(core: CoreTiming, path: str | Path, kernel: str) -> Path:
    """Write one JSON profile summary (``systolic kernel --json``'s whole-core keys)."""
    body = {"kernel": kernel, "format": REPORT_WHAT, **timing_fields(core)}
    out = write_text(path, json.dumps(body, indent=2) + "\n", "profile summary")
    _say(out, REPORT_WHAT)
    return out


class ProfileOptions:
    """``nki.profile``'s options, checked when the decorator is made (the nki.profile API
    page: working_directory must be given and absolute; save_neff_name 'file.neff' and
    save_trace_name 'profile.ntff' by default; overwrite False; profile_nth 1).
    ``num_execs`` (how many times the kernel runs; used by nki-samples' test_neuron_profile,
    not on the API page) defaults to ``profile_nth``: the run that is profiled (unsure)."""

    def __init__(self, options: dict[str, Any]) -> None:
        known = {"working_directory", "save_neff_name", "save_trace_name", "overwrite",
                 "profile_nth", "num_execs", "additional_compile_opt"}
        unknown = sorted(set(options) - known)
        if unknown:
            raise SystolicError(f"nki.profile has no option {unknown[0]!r} (it takes "
                                f"{', '.join(sorted(known))})")
        wd = options.get("working_directory")
        if not isinstance(wd, str | os.PathLike) or not os.path.isabs(os.fspath(wd)):
            raise SystolicError(f"nki.profile needs working_directory=, an absolute path "
                                f"(as on hardware), not {wd!r}")
        self.directory = Path(os.fspath(wd))
        self.neff = _name(options.get("save_neff_name", "file.neff"), "save_neff_name")
        self.trace = _name(options.get("save_trace_name", "profile.ntff"), "save_trace_name")
        self.overwrite = options.get("overwrite", False)
        if not isinstance(self.overwrite, bool):
            raise SystolicError(f"nki.profile's overwrite= is True or False, not "
                                f"{self.overwrite!r}")
        self.nth = _count(options.get("profile_nth", 1), "profile_nth")
        self.execs = _count(options.get("num_execs", self.nth), "num_execs")


def _name(value: Any, option: str) -> str:
    if not isinstance(value, str) or not value or os.path.basename(value) != value:
        raise SystolicError(f"nki.profile's {option}= is a file name, not {value!r}")
    return value


def _count(value: Any, option: str) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 1:
        raise SystolicError(f"nki.profile's {option}= is a whole number >= 1, not {value!r}")
    return value


def trace_names(trace: str, nth: int, execs: int) -> list[str]:
    """The trace files of a profile: of every ``nth`` execution up to ``execs`` (just the
    ``nth`` when there are fewer), ``<stem>.ntff`` for the first execution and
    ``<stem>_exec_<n>.ntff`` for a later one (nki-samples' test_neuron_profile names them
    so; the API page does not say)."""
    stem = os.path.splitext(trace)[0]
    runs = [nth] if execs < nth else list(range(nth, execs + 1, nth))
    return [f"{stem}.ntff" if n == 1 else f"{stem}_exec_{n}.ntff" for n in runs]


def write_profile(rec: Recorded, opts: ProfileOptions, kernel: str) -> list[Path]:
    """``nki.profile``'s files for a recorded kernel, in ``opts.directory``: the "NEFF",
    one trace per profiled execution and ``json_reports/`` with one summary each. Without
    ``overwrite=True`` a file already there is refused before anything is written."""
    d = opts.directory
    traces = trace_names(opts.trace, opts.nth, opts.execs)
    reports = [os.path.splitext(t)[0] + ".json" for t in traces]
    paths = [d / opts.neff, *(d / t for t in traces),
             *(d / "json_reports" / r for r in reports)]
    for p in paths:
        if p.exists() and not opts.overwrite:
            raise ArtifactError(f"{p}: a profile file is already there; nki.profile "
                                f"overwrites only with overwrite=True")
    try:
        (d / "json_reports").mkdir(parents=True, exist_ok=True)
    except OSError as exc:
        raise ArtifactError(f"{d}: cannot make the profile's directory: "
                            f"{exc.strerror or exc}") from None
    for p in paths:
        check_artifact_path(p, "profile file")
    core, program = longest_core(rec, time_cores(rec))
    written = [write_neff(program, paths[0])]
    written += [write_trace_file(rec, core, program, d / t, kernel) for t in traces]
    written += [write_report(core, d / "json_reports" / r, kernel) for r in reports]
    return written


def write_benchmark_files(rec: Recorded, core: CoreTiming, program: Program,
                          neff: str | None, trace: str | None, kernel: str) -> Sequence[Path]:
    """``nki.benchmark``'s ``save_neff_name`` / ``save_trace_name`` files (paths as given,
    relative to the working directory; written over, as each benchmark run saves anew)."""
    out: list[Path] = []
    if neff is not None:
        out.append(write_neff(program, neff))
    if trace is not None:
        out.append(write_trace_file(rec, core, program, trace, kernel))
    return out
