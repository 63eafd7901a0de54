"""Mutants of issue 22 (CLI, schema, workload files), in bench/mutants.py's CATALOGUE form."""

from __future__ import annotations

import sys
from pathlib import Path

sys.path.insert(0, str(Path(__file__).resolve().parent))
from mutants import Mutant

CLI = ("tests/test_cli.py",)
BAD = ("tests/test_bad_input.py",)
SCHEMA = ("tests/test_json_schema.py",)
PLOTS = ("tests/test_plots.py",)
TRACE = ("tests/test_trace.py",)

MUTANTS = (
    Mutant("spec_keeps_string_mode", "compiler/tiling.py",
           "        if not isinstance(self.perf_mode, PerfMode):\n            try:",
           "        if False:\n            try:",
           BAD, "MatmulSpec keeps perf_mode='double_row' as a string; lower() fails on k_fold"),
    Mutant("workload_fifo_blocks", "yaml_source.py",
           "        fd = os.open(name, os.O_RDONLY | getattr(os, \"O_NONBLOCK\", 0))",
           "        fd = os.open(name, os.O_RDONLY)",
           BAD, "a workload FIFO with no writer blocks the open forever"),
    Mutant("workload_device_read", "yaml_source.py",
           "        if not stat.S_ISREG(mode):\n            kind",
           "        if stat.S_ISDIR(mode) or stat.S_ISFIFO(mode):\n            kind",
           BAD, "/dev/zero is read as a workload (until the size limit or out of memory)"),
    Mutant("workload_no_size_limit", "yaml_source.py",
           "    if len(data) > max_bytes:\n",
           "    if len(data) > 2 * max_bytes:\n",
           BAD, "a workload past the size limit is parsed anyway"),
    Mutant("arch_case_sensitive", "commands/common.py",
           "as in workload files (``TRN2``).\"\"\"\n    return text.lower()",
           "as in workload files (``TRN2``).\"\"\"\n    return text",
           CLI, "--arch TRN2 refused while --dtype BF16 is accepted"),
    Mutant("width_alone_ignored", "commands/common.py",
           "    if given and not present:\n",
           "    if given and not present and False:\n",
           CLI, "--width, --timeline-op, --mx-rule without their option silently ignored"),
    Mutant("html_any_suffix", "commands/common.py",
           '    if text and Path(text).suffix.lower() not in (".html", ".htm"):',
           '    if text and Path(text).suffix.lower() in ("",):',
           CLI, "step --html x.png writes a page under an image name"),
    Mutant("perf_mode_all", "commands/matmul.py",
           "PERF_MODES = [m.spelling for m in PerfMode if m not in UNENCODED_PERF_MODES]",
           "PERF_MODES = [m.spelling for m in PerfMode]",
           CLI, "--perf-mode lists double_column/double_pixel, which have no encoding"),
    Mutant("wrote_no_what", "artifacts.py",
           '    return f"wrote {os.fspath(path)} ({what})"',
           '    return f"wrote {os.fspath(path)}"',
           CLI, "the wrote line does not say what was written"),
    Mutant("progress_on_stdout", "commands/common.py",
           '        sys.stderr.write(f"systolic: {description} ...\\n")',
           '        sys.stdout.write(f"systolic: {description} ...\\n")',
           CLI, "--progress writes into --json's stdout"),
    Mutant("bound_kind_wrong_group", "schema.py",
           '    "pe": ("pe", "weight_load"),\n    "dma": ("dma", "dma_latency"),',
           '    "pe": ("pe", "dma_latency"),\n    "dma": ("dma", "weight_load"),',
           SCHEMA, "bound.kind groups DMA fixed cost with the PE"),
    Mutant("pe_utilization_no_pack", "schema.py",
           '        "utilization": useful_macs / capacity_macs if capacity_macs else 0.0,',
           '        "utilization": useful_macs / cycles if cycles else 0.0,',
           SCHEMA, "pe.utilization not divided by the array's capacity"),
    Mutant("total_tail_not_repeated", "workload.py",
           "        tail += rep.readout_tail * r\n",
           "        tail += rep.readout_tail\n",
           SCHEMA, "a workload total's figures not multiplied by repeat (readout tail)"),
    Mutant("total_pe_cycles_once", "workload.py",
           "    pe = pe_fields(cycles=cycles, seconds=pe_s,",
           "    pe = pe_fields(cycles=cycles // 2, seconds=pe_s,",
           SCHEMA, "the total's pe view counts cycles wrongly"),
    Mutant("trace_no_views", "views/trace.py",
           "    other.update(views(report, core) if core is not None else {})\n",
           "",
           TRACE + SCHEMA, "trace metadata without the schema / pe / core views"),
    Mutant("gz_with_mtime", "views/trace.py",
           'gzip.GzipFile(filename="", fileobj=raw, mode="wb", mtime=0, compresslevel=6)',
           'gzip.GzipFile(fileobj=raw, mode="wb", compresslevel=6)',
           TRACE, "a .gz trace embeds the temporary file's name and time: not reproducible"),
    Mutant("busy_bins_unclipped", "views/plot_base.py",
           "    return np.clip(np.diff(before(edges)) / np.diff(edges), 0.0, 1.0)",
           "    return np.diff(before(edges)) / np.diff(edges)",
           PLOTS, "busy shares stray past [0, 1]: matplotlib's clipping warning on timelines"),
)
MUTANTS += (
    Mutant("workload_nul_path", "yaml_source.py",
           "    except ValueError:  # a NUL byte in the path: no file has that name\n",
           "    except KeyError:  # a NUL byte in the path: no file has that name\n",
           BAD, "a workload path with a NUL byte ends in a ValueError traceback"),
)
