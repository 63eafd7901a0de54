"""``systolic kernel FILE.py:FUNCTION``: record an NKI kernel, show its Program, its values."""

from __future__ import annotations

import argparse
import json
from typing import Any

import numpy as np

from ..errors import SystolicError
from .common import add_json

HELP = """\
Run an NKI kernel file unmodified on the model. --arg gives the kernel's tensor arguments in
order (shapes only: no values are computed unless --values); --param passes keyword
meta-parameters (ints, floats, or strings).

examples:
  systolic kernel examples/kernels/tiled_matmul.py:tiled_matmul --arch trn2 \\
      --arg lhsT=bf16[512,256] --arg rhs=bf16[512,1024] --values
  systolic kernel examples/kernels/blocked_matmul.py:blocked_matmul --arch trn2 \\
      --arg lhsT=bf16[2048,2048] --arg rhs=bf16[2048,2048] --param TILES_N=2 --json
"""


def add_parser(sub: Any) -> None:
    p = sub.add_parser("kernel", help="run an NKI kernel file: its Program, counts, values",
                       description=HELP, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("target", metavar="FILE.py:FUNCTION")
    p.add_argument("--arch", default="trn2", help="trn1, inf2, trn2 or trn3 (default trn2)")
    p.add_argument("--arg", action="append", default=[], metavar="NAME=DTYPE[D0,D1,...]",
                   help="a tensor argument, in order")
    p.add_argument("--param", action="append", default=[], metavar="NAME=VALUE",
                   help="a keyword meta-parameter")
    p.add_argument("--values", action="store_true",
                   help="fill the inputs with seeded random data and run the functional "
                        "simulator")
    p.add_argument("--seed", type=int, default=0, help="seed of --values (default 0)")
    p.add_argument("--program", action="store_true", help="print the Program text")
    add_json(p)
    p.set_defaults(run=run)


def _value(text: str) -> Any:
    for conv in (int, float):
        try:
            return conv(text)
        except ValueError:
            pass
    return text


def _split(text: str, what: str) -> tuple[str, str]:
    name, sep, rest = text.partition("=")
    if not sep or not name or not rest:
        raise SystolicError(f"{what} {text!r} is not NAME=VALUE")
    return name.strip(), rest.strip()


def random_inputs(specs: list[Any], seed: int) -> list[np.ndarray]:
    """Seeded standard-normal inputs rounded to each argument's dtype."""
    from ..dtypes import FORMATS, decode, encode

    rng = np.random.default_rng(seed)
    out = []
    for s in specs:
        fmt = s.dtype.fmt
        if fmt not in FORMATS:  # raw words (MX x4 containers): finite fp8 bytes 0x00..0x7E
            raw = rng.integers(0, 0x7F, size=(*s.shape, s.dtype.itemsize), dtype=np.uint8)
            out.append(raw.view(s.dtype.np_dtype).reshape(s.shape))
            continue
        if fmt == "uint8":  # read as E8M0 scales by MX kernels: 2^-7 .. 2^7
            x = rng.integers(120, 135, size=s.shape).astype(np.float32)
        elif FORMATS[fmt].is_int:
            x = rng.integers(-8, 8, size=s.shape).astype(np.float32)
        else:
            x = rng.standard_normal(s.shape).astype(np.float32)
        raw = encode(x, fmt)
        out.append(raw if s.dtype.np_dtype is None else decode(raw, fmt).astype(s.dtype.np_dtype))
    return out


def run(args: argparse.Namespace) -> int:
    from ..arch import get_arch
    from ..nki.run import execute, load_kernel, parse_arg, record, set_default_arch

    path, sep, func = args.target.rpartition(":")
    if not sep or not path or not func:
        raise SystolicError(f"{args.target!r} is not FILE.py:FUNCTION")
    arch = get_arch(args.arch)
    set_default_arch(arch.name)
    specs = [parse_arg(_split(a, "--arg")[1]) for a in args.arg]
    params = dict((k, _value(v)) for k, v in (_split(p, "--param") for p in args.param))
    kernel = load_kernel(path, func)
    rec = record(kernel, specs, params, arch=arch)
    info: dict[str, Any] = {
        "kernel": args.target, "arch": arch.name, "nki_ops": rec.ops,
        "instructions": len(rec.program), "engines": rec.counts(),
        "opcodes": rec.program.counts(), "weight_cache_hits": rec.cache_hits,
    }
    if args.values:
        arrays = random_inputs(specs, args.seed)
        res = execute(rec, arrays)
        outs = res if isinstance(res, tuple | list) else [res]
        info["outputs"] = [{"shape": list(o.shape), "dtype": str(o.dtype),
                            "sum": float(np.asarray(o, dtype=np.float64).sum()),
                            "max_abs": float(np.abs(np.asarray(o, dtype=np.float64)).max())}
                           for o in outs if isinstance(o, np.ndarray)]
    if args.program:
        try:
            print(rec.program.text())
        except Exception:
            for ins in rec.program:
                print(repr(ins))
    if args.json:
        print(json.dumps(info, indent=2))
        return 0
    if not args.program:
        print(f"{args.target} on {arch.name}: {rec.ops} NKI operations -> "
              f"{len(rec.program)} instructions")
        for name, n in info["engines"].items():
            print(f"  {name:<8} {n:>8}")
        print("  " + ", ".join(f"{k}={v}" for k, v in info["opcodes"].items()))
        print(f"  weight-tile cache hits: {rec.cache_hits}")
        for o in info.get("outputs", []):
            print(f"  output {o['shape']} {o['dtype']}: sum {o['sum']:.6g}, "
                  f"max |x| {o['max_abs']:.6g}")
    return 0
