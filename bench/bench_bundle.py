"""Encode and decode the 2048^3 bf16 Program as 64-byte bundles; bundles per second.

Baseline, in the same run on the same Program: ``pickle`` (protocol 5) dumping and loading
it, a general-purpose serialiser of the same frozen dataclasses that checks nothing. The
ratio says what the field checks, range checks and fixed layout cost on top.

    python bench/bench_bundle.py [--size 2048] [--dtype bf16] [--repeat 7]

Prints a Markdown table, one row per generation (trn1 = gen2, trn2 = gen3, trn3 = gen4).
Times are the best of ``--repeat`` rounds (wall clock, time.perf_counter; the four
operations take turns within a round), one Python thread.
"""

from __future__ import annotations

import argparse
import pickle
import platform
import sys

import numpy as np
from timer import best_interleaved

from systolic.arch import get_arch
from systolic.compiler import MatmulSpec, lower
from systolic.compiler.bundle import decode_program, encode_program


def main() -> None:
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--size", type=int, default=2048, help="M = K = N")
    ap.add_argument("--dtype", default="bf16")
    ap.add_argument("--repeat", type=int, default=7)
    args = ap.parse_args()

    print(f"# {args.size}^3 {args.dtype}, best of {args.repeat}; Python "
          f"{sys.version.split()[0]}, numpy {np.__version__}, "
          f"{platform.processor() or platform.machine()}")
    print("| arch (gen) | bundles | encode (bundles/s) | decode (bundles/s) "
          "| pickle dump (instr/s) | pickle load (instr/s) | encode+decode / pickle |")
    print("| --- | ---: | ---: | ---: | ---: | ---: | ---: |")
    for name in ("trn1", "trn2", "trn3"):
        arch = get_arch(name)
        gen = arch.generation
        program = lower(MatmulSpec(args.size, args.size, args.size, args.dtype), arch).program
        data = encode_program(program, gen)
        pickled = pickle.dumps(program, protocol=5)
        assert decode_program(data, gen) == program == pickle.loads(pickled)
        t_enc, t_dec, t_pd, t_pl = best_interleaved([
            lambda p=program, g=gen: encode_program(p, g),
            lambda d=data, g=gen: decode_program(d, g),
            lambda p=program: pickle.dumps(p, protocol=5),
            lambda s=pickled: pickle.loads(s),
        ], args.repeat)
        n = len(program)
        print(f"| {name} ({gen}) | {n} | {n / t_enc:,.0f} | {n / t_dec:,.0f} "
              f"| {n / t_pd:,.0f} | {n / t_pl:,.0f} | {(t_enc + t_dec) / (t_pd + t_pl):.1f}x |")


if __name__ == "__main__":
    main()
