"""ISA: the quadrant rule, flags, perf modes and the text form."""

from __future__ import annotations

import pytest
from hypothesis import given
from hypothesis import strategies as st

from systolic import AccessPattern, CalcFlags, LoadStationary, MatMul, PerfMode, Program, Space
from systolic.errors import ParseError, ShapeError
from systolic.isa import DmaLoad, Fp32Pass, ReadOut, col_group, row_group


@pytest.mark.parametrize(("pos", "size", "want"), [
    (0, 32, 1), (32, 32, 2), (64, 32, 4), (96, 32, 8), (0, 16, 1), (100, 20, 8),
    (0, 64, 3), (64, 64, 12), (32, 33, 3), (0, 65, 15), (0, 128, 15),
])
def test_quadrant_rule(pos: int, size: int, want: int) -> None:
    # seed 000 translateToRowGroup: pos>>5 picks {1,2,4,8} (size<=32), {3,12} (<=64), else 15
    assert row_group(pos, size) == want
    assert col_group(pos, size) == want
    assert col_group(pos, size, force=True) == 15


def test_flag_and_perf_values_are_the_seeds() -> None:
    assert (CalcFlags.START, CalcFlags.STOP, CalcFlags.ACCUMULATE) == (1, 2, 4)
    assert [m.value for m in PerfMode] == [0, 1, 2, 3, 4]
    assert PerfMode.parse("double_row") is PerfMode.DOUBLE_ROW
    assert PerfMode.DOUBLE_ROW_SW_INTERLEAVE.k_fold == 2
    with pytest.raises(ShapeError, match="unknown perf mode"):
        PerfMode.parse("quad_row")


SMALL = """\
DmaLoad src=DRAM[0:64:2]@0x0(64:32):bf16 dst=SBUF[0:64]@0x0(1:32):bf16
LoadStationary src=SBUF[0:64]@0x0(1:32):bf16 row_group=3 col_group=1
MatMul moving=SBUF[0:64]@0xe000(1:100):bf16 dst=PSUM[0:32]@0x0(1:100):fp32 flags=START|STOP \
stationary_dtype=bf16 row_group=3 col_group=1
ReadOut src=PSUM[0:32]@0x0(1:100):fp32 dst=DRAM[0:32:400]@0x4000(1:100):fp32
"""


def test_small_program_text_round_trips() -> None:
    small = SMALL.replace("\\\n", "")
    prog = Program.parse(small)
    assert prog.text() == small
    mm = prog[2]
    assert isinstance(mm, MatMul)
    assert mm.flags == CalcFlags.START | CalcFlags.STOP
    assert mm.moving.shape == (64, 100)
    assert mm.dst.start_address() == 0
    assert prog.counts() == {"LoadStationary": 1, "MatMul": 1, "DmaLoad": 1, "ReadOut": 1}


def test_start_address_folds_the_partition() -> None:
    sb = AccessPattern(Space.SBUF, 5, 1, 0x40, ((1, 8),), "bf16")
    ps = AccessPattern(Space.PSUM, 5, 1, 0x40, ((1, 8),), "fp32")
    assert sb.start_address() == (5 << 18) | 0x40
    assert ps.start_address() == (5 << 15) | 0x40


def _ap(space: Space, dtype: str) -> st.SearchStrategy[AccessPattern]:
    dims = st.lists(st.tuples(st.integers(-64, 64), st.integers(1, 512)), min_size=1,
                    max_size=3).map(tuple)
    return st.builds(AccessPattern, st.just(space), st.integers(0, 127), st.integers(1, 128),
                     st.integers(0, 1 << 20), dims, st.just(dtype),
                     st.integers(0, 4096) if space is Space.DRAM else st.just(0))


INSTRUCTIONS = st.one_of(
    st.builds(LoadStationary, _ap(Space.SBUF, "bf16"), st.integers(0, 127),
              st.sampled_from([1, 2, 4, 8, 3, 12, 15]), st.sampled_from([1, 3, 15]),
              st.sampled_from(list(PerfMode)), st.sampled_from(list(Fp32Pass))),
    st.builds(MatMul, _ap(Space.SBUF, "fp8_e4m3"), _ap(Space.PSUM, "fp32"),
              st.sampled_from([CalcFlags(v) for v in range(8)]),
              st.sampled_from(["bf16", "fp8_e5m2"]), st.integers(0, 127),
              st.sampled_from([1, 15]), st.sampled_from([2, 15]),
              st.sampled_from(list(PerfMode)), st.integers(-128, 127), st.integers(0, 255),
              st.sampled_from(list(Fp32Pass))),
    st.builds(DmaLoad, _ap(Space.DRAM, "int8"), _ap(Space.SBUF, "int8")),
    st.builds(ReadOut, _ap(Space.PSUM, "int48"), _ap(Space.DRAM, "int48")),
)


@given(st.lists(INSTRUCTIONS, max_size=8))
def test_text_form_round_trips(instructions: list[object]) -> None:
    prog = Program(instructions)
    assert Program.parse(prog.text()) == prog


@pytest.mark.parametrize(("text", "match"), [
    ("Jump to=3", "unknown opcode"),
    ("MatMul moving=SBUF[0:1]@0x0(1:1):bf16 bogus=1", "no field 'bogus'"),
    ("LoadStationary src=SBUF[0:1]@0x0:bf16", "bad value for src"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf17", "unknown format"),
    ("LoadStationary column=3", "src"),
])
def test_parse_errors_name_the_line(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match) as info:
        Program.parse("# comment\n\n" + text)
    assert info.value.line == 3
