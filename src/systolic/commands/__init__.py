"""Subcommands of the ``systolic`` CLI: each module has ``add_parser(subparsers)`` and
``run(args) -> int``; :mod:`systolic.cli` lists them."""
