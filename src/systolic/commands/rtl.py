"""``systolic rtl``: the integer PE cell as hardware (Verilog export, HDL simulation)."""

from __future__ import annotations

from typing import Any

from ..rtl.cli import add_rtl_parser, run_rtl


def add_parser(sub: Any) -> None:
    add_rtl_parser(sub).set_defaults(run=run_rtl)
