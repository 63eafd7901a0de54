"""ISA: the quadrant rule, flags, perf modes and the text form."""

from __future__ import annotations

import dataclasses
import typing

import pytest
from helpers import assert_program_text
from hypothesis import given
from hypothesis import strategies as st

from systolic import (
    AccessPattern,
    CalcFlags,
    LoadStationary,
    MatMul,
    PerfMode,
    Program,
    Space,
    verify,
)
from systolic.errors import ParseError, ShapeError
from systolic.isa import (
    OPCODES,
    Activation,
    ActivationFunc,
    AluOp,
    DmaCopy,
    DmaLoad,
    Engine,
    Fp32Pass,
    Instruction,
    Memset,
    ReadOut,
    TensorCopy,
    TensorReduce,
    TensorScalar,
    TensorTensor,
    TileGroup,
    col_group,
    row_group,
    tile_position_problem,
)


@pytest.mark.parametrize(("pos", "size", "want"), [
    (0, 32, 1), (32, 32, 2), (64, 32, 4), (96, 32, 8), (0, 16, 1), (100, 20, 8),
    (0, 64, 3), (64, 64, 12), (32, 33, 3), (0, 65, 15), (0, 128, 15),
])
def test_quadrant_rule(pos: int, size: int, want: int) -> None:
    # seed 000 translateToRowGroup: pos>>5 picks {1,2,4,8} (size<=32), {3,12} (<=64), else 15
    assert row_group(pos, size) == want
    assert col_group(pos, size) == want
    assert col_group(pos, size, force=True) == 15
    assert isinstance(row_group(pos, size), TileGroup)


def test_tile_groups_are_the_seven_masks() -> None:
    assert sorted(int(g) for g in TileGroup) == [1, 2, 3, 4, 8, 12, 15]
    assert TileGroup.parse(12) is TileGroup.Q23
    for bad in (0, 5, 16, True, "3"):
        with pytest.raises(ShapeError, match="not a quadrant mask"):
            TileGroup.parse(bad)


@pytest.mark.parametrize(("pos", "size", "ok"), [
    (0, 32, True), (96, 20, True), (100, 20, False), (32, 64, False), (64, 64, True),
    (32, 33, False), (0, 65, True), (32, 128, False), (0, 128, True),
])
def test_tile_position_must_be_a_multiple_of_its_group(pos: int, size: int, ok: bool) -> None:
    # NKI nc_matmul: tile_position a multiple of tile_size (32, 64 or the whole 128)
    assert (tile_position_problem(pos, size) == "") is ok


def test_opcodes_are_the_instruction_union() -> None:
    assert typing.get_args(Instruction) == OPCODES
    assert len(set(OPCODES)) == len(OPCODES) == 38  # + Transpose, BnStats, BnAggr, Iota,
    # Reciprocal, TensorTensorScan (issue 19); + AffineSelect, RangeSelect, Select,
    # CopyPredicated, PartitionReduce, Max8, FindIndex8, MatchReplace8, StreamShuffle,
    # LocalGather, SequenceBounds, Rand, Dropout (issue 19, second part); + DmaIndirect;
    # + ScalarTensorTensor (issue 19, flash attention backward); + TensorCopyDynamic,
    # GatherFlattened (issue 19i); + TensorCopyDynamicDst


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
    assert_program_text(prog, SMALL)
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


def _any_ap(dtype: str = "bf16") -> st.SearchStrategy[AccessPattern]:
    return st.sampled_from(list(Space)).flatmap(lambda sp: _ap(sp, dtype))


FLOATS = st.floats(allow_nan=False, width=64)
ENGINE_INSTRUCTIONS = st.one_of(
    st.builds(DmaCopy, _any_ap(), _any_ap(), st.integers(0, 15)),
    st.builds(TensorCopy, _any_ap("fp32"), _any_ap("bf16"), st.sampled_from(list(Engine))),
    st.builds(TensorTensor, _any_ap(), _any_ap(), _any_ap("fp32"),
              st.sampled_from(list(AluOp)), st.sampled_from(list(Engine))),
    st.builds(Memset, _any_ap(), FLOATS, st.sampled_from(list(Engine))),
    st.builds(Activation, _any_ap(), _any_ap(), st.sampled_from(list(ActivationFunc)), FLOATS,
              st.sampled_from(list(Engine)), st.none() | _any_ap("fp32"),
              st.none() | _any_ap("fp32"), st.none() | _any_ap("fp32"),
              st.sampled_from(list(AluOp))),
    st.builds(TensorScalar, _any_ap(), _any_ap(), st.sampled_from(list(AluOp)), FLOATS,
              st.sampled_from(list(Engine)), st.none() | _any_ap("fp32"), st.booleans(),
              st.none() | st.sampled_from(list(AluOp)), FLOATS, st.none() | _any_ap("fp32"),
              st.booleans()),
    st.builds(TensorReduce, _any_ap(), _any_ap("fp32"), st.sampled_from(list(AluOp)),
              st.sampled_from(list(Engine)), st.booleans()),
)


@given(st.lists(INSTRUCTIONS | ENGINE_INSTRUCTIONS, max_size=8))
def test_text_form_round_trips(instructions: list[object]) -> None:
    prog = Program(instructions)
    assert Program.parse(prog.text()) == prog


ENGINE_TEXT = """\
DmaCopy src=DRAM[0:4:-64]@0x100(1:8):bf16 dst=SBUF[0:4]@0x0(1:8):bf16 queue=3
TensorCopy src=PSUM[0:4]@0x0(1:8):fp32 dst=SBUF[0:4]@0x40(1:8):bf16 engine=gpsimd
TensorTensor a=SBUF[0:4]@0x0(1:8):bf16 b=SBUF[0:4]@0x40(1:8):bf16 \\
dst=SBUF[0:4]@0x80(1:8):fp32 op=maximum
Memset dst=SBUF[0:4]@0x0(1:8):bf16 value=-1.5
Activation src=SBUF[0:4]@0x0(1:8):bf16 dst=SBUF[0:4]@0x40(1:8):bf16 func=identity \\
scale=0.125
"""


def test_engine_instructions_read_by_field_type() -> None:
    prog = Program.parse(ENGINE_TEXT.replace("\\\n", ""))
    copy, cast, tt, ms, act = prog
    assert isinstance(copy, DmaCopy) and copy.queue == 3 and copy.src.partition_step == -64
    assert isinstance(cast, TensorCopy) and cast.engine is Engine.GPSIMD
    assert isinstance(tt, TensorTensor) and tt.op is AluOp.MAXIMUM and tt.engine is Engine.VECTOR
    assert isinstance(ms, Memset) and ms.value == -1.5 and isinstance(ms.value, float)
    assert isinstance(act, Activation) and act.func is ActivationFunc.IDENTITY
    assert act.scale == 0.125 and act.engine is Engine.SCALAR
    assert_program_text(prog, ENGINE_TEXT)


def test_verified_program_with_a_negative_dram_row_step_round_trips() -> None:
    # rows stored bottom-up in device memory: row r of the tile at 0x1000 - 64 r
    a = AccessPattern(Space.DRAM, 0, 64, 0x1000, ((1, 32),), "bf16", partition_step=-64)
    w = AccessPattern(Space.SBUF, 0, 64, 0, ((1, 32),), "bf16")
    x = AccessPattern(Space.SBUF, 0, 64, 0x100, ((1, 16),), "bf16")
    dst = AccessPattern(Space.PSUM, 0, 32, 0, ((1, 16),), "fp32")
    out = AccessPattern(Space.DRAM, 0, 32, 0x3000, ((1, 16),), "fp32", partition_step=-64)
    prog = Program([
        DmaLoad(a, w), DmaLoad(dataclasses.replace(a, offset=0x1800, dims=((1, 16),)), x),
        LoadStationary(w, 0, row_group(0, 64), col_group(0, 32)),
        MatMul(x, dst, CalcFlags.START | CalcFlags.STOP, "bf16", 0, row_group(0, 64),
               col_group(0, 32)),
        ReadOut(dst, out),
    ])
    verify(prog, "trn2", dram_bytes=1 << 14)
    assert "DRAM[0:64:-64]" in prog.text()
    assert Program.parse(prog.text()) == prog


@pytest.mark.parametrize(("text", "match"), [
    ("Jump to=3", "unknown opcode"),
    ("MatMul moving=SBUF[0:1]@0x0(1:1):bf16 bogus=1", "no field 'bogus'"),
    ("LoadStationary src=SBUF[0:1]@0x0:bf16", "bad value for src"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf17", "unknown format"),
    ("LoadStationary column=3", "src"),
    # strict: a field once, ASCII digits, no underscores, the exact spelling of each value
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 column=1 column=2", "given twice"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 column=1_0", "bad value for column"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 column=\u0661\u0660", "bad value for column"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 column=\uff11", "bad value for column"),
    ("LoadStationary src=SBUF[0:\u0661]@0x0(1:1):bf16", "bad value for src"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1_0):bf16", "bad value for src"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 perf_mode=DOUBLE_ROW", "bad value for perf"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 row_group=5", "bad value for row_group"),
    ("LoadStationary src=SBUF[0:1]@0x0(1:1):bf16 fp32_pass=half", "bad value for fp32_pass"),
    ("MatMul moving=SBUF[0:1]@0x0(1:1):bf16 flags=START|START", "bad value for flags"),
    ("Memset dst=SBUF[0:1]@0x0(1:1):bf16 value=1_0.5", "bad value for value"),
    ("Memset dst=SBUF[0:1]@0x0(1:1):bf16 engine=Vector", "bad value for engine"),
])
def test_parse_errors_name_the_line(text: str, match: str) -> None:
    with pytest.raises(ParseError, match=match) as info:
        Program.parse("# comment\n\n" + text)
    assert info.value.line == 3


def test_access_pattern_hash_is_its_values_and_never_travels() -> None:
    # the kept hash (issue 20) must be the value's hash, equal for equal patterns, and
    # must not cross a pickle: string and Space hashes differ between processes
    import dataclasses
    import pickle

    a = AccessPattern(Space.DRAM, 3, 4, 16, ((2, 8), (1, 2)), "fp8_e4m3", 64)
    values = tuple(getattr(a, f.name) for f in dataclasses.fields(a) if f.compare)
    assert hash(a) == hash(values)
    twin = AccessPattern(Space.DRAM, 3, 4, 16, ((2, 8), (1, 2)), "fp8_e4m3", 64)
    assert twin == a and hash(twin) == hash(a) and len({a, twin}) == 1
    moved = dataclasses.replace(a, offset=32)
    assert moved != a and moved._hash is None
    back = pickle.loads(pickle.dumps(a))
    assert back == a and back._hash is None and back._rect is None
    assert tuple(getattr(back, f.name) for f in dataclasses.fields(back) if f.compare) \
        == values
    assert hash(back) == hash(a)
