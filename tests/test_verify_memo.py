"""The verifier's memo of stateless checks: an instruction equal to one that passed still
gets every state check (tiles, PSUM groups), and one equal only by value (an int for an
enum field) gets every check."""

from __future__ import annotations

import dataclasses

import pytest

from systolic import (
    AccessPattern,
    CalcFlags,
    LoadStationary,
    MatMul,
    Program,
    ReadOut,
    Space,
    VerifyError,
    verify,
)
from systolic.isa import col_group, row_group

SS = CalcFlags.START | CalcFlags.STOP


def _load(off: int = 0) -> LoadStationary:
    return LoadStationary(AccessPattern(Space.SBUF, 0, 128, off, ((1, 128),), "bf16"), 0,
                          row_group(0, 128), col_group(0, 128))


def _mm(flags: CalcFlags = SS) -> MatMul:
    return MatMul(AccessPattern(Space.SBUF, 0, 128, 0x8000, ((1, 512),), "bf16"),
                  AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32"), flags, "bf16", 0,
                  row_group(0, 128), col_group(0, 128))


def _ro() -> ReadOut:
    return ReadOut(AccessPattern(Space.PSUM, 0, 128, 0, ((1, 512),), "fp32"),
                   AccessPattern(Space.DRAM, 0, 128, 0, ((1, 512),), "fp32", 2048))


def _fails(prog: list[object], index: int, match: str) -> None:
    with pytest.raises(VerifyError, match=match) as info:
        verify(Program(prog), "trn2", dram_bytes=1 << 20)
    assert info.value.index == index


def test_repeated_instructions_pass() -> None:
    verify(Program([_load(), _mm(), _ro(), _mm(), _ro(), _load(), _mm(), _ro()]), "trn2",
           dram_bytes=1 << 20)


def test_a_repeated_start_over_an_unread_result_fails() -> None:
    # the second MatMul equals the first (memo hit) but its region still holds a result
    _fails([_load(), _mm(), _mm()], 2, "never read out")


def test_a_repeated_read_out_of_an_empty_region_fails() -> None:
    _fails([_load(), _mm(), _ro(), _ro()], 3, "holds no finished group")


def test_a_repeated_matmul_after_its_tile_was_replaced_fails() -> None:
    other = dataclasses.replace(_load(), column=0,
                                src=AccessPattern(Space.SBUF, 0, 64, 0, ((1, 128),), "bf16"),
                                row_group=row_group(0, 64))
    _fails([_load(), _mm(), _ro(), other, _mm()], 4, "no stationary tile latched")


def test_an_int_equal_to_an_enum_member_is_still_refused() -> None:
    # flags=1 equals CalcFlags.START | ... by value and hash; the type check must still run
    bad = dataclasses.replace(_mm(), flags=int(SS))
    assert bad == _mm()
    _fails([_load(), _mm(), _ro(), bad], 3, "flags must be CalcFlags")
