"""64-byte bundles: round trips, the seed's offsets, and corrupted bytes.

Expected bytes are computed here from the instruction and from seed 000's text (its offsets,
``part << 18`` / ``part << 15``, the opcodes 0x1009 / 0x100A, fp4's dtype codes 0x05 / 0x10),
never by calling the encoder's own helpers.
"""

from __future__ import annotations

import dataclasses
import struct
from pathlib import Path

import pytest
from hypothesis import HealthCheck, given, settings
from hypothesis import strategies as st

from systolic.arch import ARCHS, Arch, get_arch
from systolic.compiler import MatmulSpec, bundle_doc, lower
from systolic.compiler.bundle import decode_program, encode_program
from systolic.dtypes import FORMATS
from systolic.errors import ArchError, BundleError, VerifyError
from systolic.isa import (
    AccessPattern,
    CalcFlags,
    DmaLoad,
    Fp32Pass,
    LdWeightMx,
    LoadStationary,
    MatMul,
    MatmultMx,
    PerfMode,
    Program,
    ReadOut,
    Space,
    col_group,
    row_group,
)
from systolic.verify import verify

B = 64


def u16(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 2], "little")


def u32(b: bytes, off: int) -> int:
    return int.from_bytes(b[off:off + 4], "little")


def reseal(data: bytes | bytearray, base: int) -> bytearray:
    """Fix the check byte (+0x03) of the bundle at ``base`` so the 64 bytes sum to 0."""
    buf = bytearray(data)
    buf[base + 3] = (buf[base + 3] - sum(buf[base:base + B])) & 0xFF
    return buf


def sbuf(part: int, parts: int, off: int, dims: tuple[tuple[int, int], ...],
         dtype: str = "bf16") -> AccessPattern:
    return AccessPattern(Space.SBUF, part, parts, off, dims, dtype)


def psum(part: int, parts: int, off: int, n: int, dtype: str = "fp32") -> AccessPattern:
    return AccessPattern(Space.PSUM, part, parts, off, ((1, n),), dtype)


def dram(off: int, parts: int, pstep: int, dims: tuple[tuple[int, int], ...],
         dtype: str = "bf16") -> AccessPattern:
    return AccessPattern(Space.DRAM, 0, parts, off, dims, dtype, partition_step=pstep)


def matmul(perf: PerfMode = PerfMode.NONE, flags: CalcFlags = CalcFlags.START | CalcFlags.STOP,
           n: int = 200) -> MatMul:
    """K = 32 rows at partition 32, M = 32 columns at 64: groups row 2, col 4."""
    lead = 2 if perf.k_fold == 2 else 1
    dims = ((n, 2), (1, n)) if lead == 2 else ((1, n),)
    dtype = "fp8_e4m3" if lead == 2 else "bf16"
    return MatMul(moving=sbuf(32, 32, 0x1240, dims, dtype), dst=psum(64, 32, 0x800, n),
                  flags=flags, stationary_dtype=dtype, stationary_partition=32,
                  row_group=row_group(32, 32), col_group=col_group(64, 32), perf_mode=perf)


def mx_pair() -> tuple[LdWeightMx, MatmultMx]:
    ld = LdWeightMx(src=sbuf(8, 120, 0x400, ((1, 128),), "mxfp8_e4m3"),
                    scale=sbuf(0, 15, 0x2000, ((1, 128),), "e8m0"), column=0, row_group=15,
                    fmt="mxfp8_e4m3")
    mm = MatmultMx(moving=sbuf(8, 120, 0x8000, ((1, 256),), "mxfp8_e4m3"),
                   scale=sbuf(0, 15, 0x9000, ((1, 256),), "e8m0"),
                   dst=psum(96, 32, 0x1000, 256), flags=CalcFlags(6), fmt="mxfp8_e4m3",
                   stationary_fmt="mxfp8_e4m3", row_group=15, psum_zero_region=5)
    return ld, mm


# -- compiled programs round-trip -------------------------------------------------------
SPECS = [
    MatmulSpec(300, 700, 200, "bf16"),
    MatmulSpec(128, 128, 512, "fp16"),
    MatmulSpec(130, 257, 70, "fp32"),  # two-pass
    MatmulSpec(100, 70, 20, "int8", zp_a=3, zp_b=-5),
    MatmulSpec(64, 96, 40, "tf32"),
]


@pytest.mark.parametrize("arch", list(ARCHS))
@pytest.mark.parametrize("spec", SPECS, ids=lambda s: f"{s.dtype}-{s.m}x{s.k}x{s.n}")
def test_compiled_programs_round_trip(arch: str, spec: MatmulSpec) -> None:
    a = get_arch(arch)
    program = lower(spec, a).program
    data = encode_program(program, a.generation)
    assert len(data) == B * len(program)
    assert decode_program(data, a.generation) == program


@pytest.mark.parametrize("arch", ["trn2", "trn3"])
def test_fp32_two_pass_and_double_row_round_trip(arch: str) -> None:
    a = get_arch(arch)
    fp32 = lower(MatmulSpec(200, 300, 100, "fp32"), a).program
    assert {int(getattr(i, "fp32_pass", 0)) for i in fp32} == {0, 1, 2}
    dr = lower(MatmulSpec(300, 700, 200, "fp8_e4m3", perf_mode=PerfMode.DOUBLE_ROW), a).program
    assert any(getattr(i, "perf_mode", None) == PerfMode.DOUBLE_ROW for i in dr)
    for p in (fp32, dr):
        assert decode_program(encode_program(p, a.generation), a.generation) == p


def test_large_bf16_program_round_trips() -> None:
    p = lower(MatmulSpec(2048, 2048, 2048, "bf16"), get_arch("trn2")).program
    assert decode_program(encode_program(p, 3), 3) == p


# -- the seed's offsets -----------------------------------------------------------------
def test_header_opcode_generation_and_check_byte() -> None:
    ld, mm = mx_pair()
    data = encode_program(Program([ld, mm]), 4)
    assert u16(data, 0) == 0x1009 and u16(data, B) == 0x100A  # seed 000 MX opcodes
    for base in (0, B):
        assert data[base + 2] == 4
        assert sum(data[base:base + B]) % 256 == 0


def test_gen2_matmul_fields_at_seed_offsets() -> None:
    ins = matmul()
    b = encode_program(Program([ins]), 2)
    assert b[0x24] == ins.row_group == 2
    assert b[0x25] == ins.col_group == 4
    low = ins.col_group & -ins.col_group
    assert b[0x2E] == ins.col_group // low == 1  # normalised: lowest quadrant at bit 0
    assert u16(b, 0x27) == ins.dst.free_elems  # scale 1
    assert b[0x2B] == int(ins.flags) == 3
    # moving SBUF start address: part<<18 | offset in bits 0..27, region 1 above
    assert u32(b, 0x04) & 0x0FFFFFFF == (32 << 18) | 0x1240 and u32(b, 0x04) >> 28 == 1
    # PSUM destination: part<<15 | offset, region 2
    assert u32(b, 0x30) & 0x0FFFFFFF == (64 << 15) | 0x800 and u32(b, 0x30) >> 28 == 2
    assert b[0x2C] == b[0x2D] == 0  # the gen3 word is not used on gen2


@pytest.mark.parametrize("col", [1, 2, 4, 8, 3, 12, 15])
def test_gen2_normalised_column_group(col: int) -> None:
    ins = LoadStationary(sbuf(0, 32, 0, ((1, 32),)), column=0, row_group=1, col_group=col)
    b = encode_program(Program([ins]), 2)
    shift = next(i for i in range(4) if col >> i & 1)
    assert (b[0x24], b[0x25], b[0x2E]) == (1, col, col >> shift)


@pytest.mark.parametrize("gen", [3, 4])
def test_gen3_group_word(gen: int) -> None:
    ins = LoadStationary(sbuf(64, 64, 0x100, ((1, 64),)), column=0, row_group=12, col_group=3)
    b = encode_program(Program([ins]), gen)
    assert u16(b, 0x2C) == (3 << 8) | 12
    assert b[0x24] == b[0x25] == b[0x2E] == 0


@pytest.mark.parametrize("gen", [2, 3])
def test_double_row_active_columns_halve(gen: int) -> None:
    ins = matmul(PerfMode.DOUBLE_ROW, n=300)
    b = encode_program(Program([ins]), gen)
    assert u16(b, 0x27) == 300 // 2  # seed: getNumElementsPerPartition(out) / scale
    assert b[0x21] == 1  # the perf byte


def test_gen4_mx_fields_at_seed_offsets() -> None:
    ld, mm = mx_pair()
    b = encode_program(Program([ld, mm]), 4)
    # dual-address descriptor: data ADDR4 then scale ADDR4, SBUF part<<18
    assert u32(b, 0x04) & 0x0FFFFFFF == (8 << 18) | 0x400
    assert u32(b, 0x08) & 0x0FFFFFFF == 0x2000
    m = b[B:]
    assert m[0x2B] == int(mm.flags) == 6  # raw accumulate byte
    assert m[0x2C] == mm.row_group and m[0x2D] == 0x0F and b[0x2D] == 0x0F
    assert m[0x2F] == mm.psum_zero_region == 5
    # the PSUM destination pattern at +0x30: part<<15 | offset, then (step, num) words
    assert u32(m, 0x30) & 0x0FFFFFFF == (96 << 15) | 0x1000
    assert struct.unpack_from("<hH", m, 0x34) == (1, 256)


def test_fp4_dtype_code_moves_on_gen4() -> None:
    """seed 000 "Shared vs. Diverged": fp4 e2m1 is 0x05 on gen2/gen3, 0x10 on gen4."""
    ins = LoadStationary(sbuf(0, 32, 0, ((1, 32),), "fp4_e2m1"), row_group=1, col_group=1)
    assert [encode_program(Program([ins]), g)[0x15] for g in (2, 3, 4)] == [0x05, 0x05, 0x10]


# -- random instructions round-trip ------------------------------------------------------
MASKS = [1, 2, 4, 8, 3, 12, 15]
ENCODABLE_PERF = [PerfMode.NONE, PerfMode.DOUBLE_ROW, PerfMode.DOUBLE_ROW_SW_INTERLEAVE]


def dtypes_for(gen: int, mx_only: bool = False) -> list[str]:
    """Formats with a dtype code on ``gen``: MX formats and E8M0 on gen4 only (seed 000)."""
    names = [n for n, f in FORMATS.items() if gen == 4 or f.kind not in ("mx", "scale")]
    return [n for n in names if FORMATS[n].kind == "mx"] if mx_only else names


@st.composite
def onchip(draw: st.DrawFn, gen: int, small: bool = False) -> AccessPattern:
    """An SBUF/PSUM pattern; ``small`` keeps nums <= 40 so that a MatMul destination's
    element count (also written as the 16-bit num_active_cols) fits: 40**3 < 2**16."""
    space = draw(st.sampled_from([Space.SBUF, Space.PSUM]))
    shift = 18 if space is Space.SBUF else 15
    num = st.integers(1, 40 if small else 2**16 - 1)
    dims = draw(st.lists(st.tuples(st.integers(-(2**15), 2**15 - 1), num), min_size=1,
                         max_size=3))
    return AccessPattern(space, draw(st.integers(0, 127)), draw(st.integers(1, 255)),
                         draw(st.integers(0, 2**shift - 1)), tuple(dims),
                         draw(st.sampled_from(dtypes_for(gen))))


@st.composite
def dram_ap(draw: st.DrawFn, gen: int) -> AccessPattern:
    dims = draw(st.lists(st.tuples(st.integers(-(2**31), 2**31 - 1), st.integers(1, 2**32 - 1)),
                         min_size=1, max_size=3))
    return AccessPattern(Space.DRAM, draw(st.integers(0, 2**16 - 1)),
                         draw(st.integers(1, 2**16 - 1)), draw(st.integers(0, 2**48 - 1)),
                         tuple(dims), draw(st.sampled_from(dtypes_for(gen))),
                         partition_step=draw(st.integers(-(2**47), 2**47 - 1)))


FLAGS = {2: range(4), 3: range(8), 4: [0, 1, 2, 3, 4, 6]}


def instruction(gen: int) -> st.SearchStrategy[object]:
    u8, mask = st.integers(0, 255), st.sampled_from(MASKS)
    perf, i16 = st.sampled_from(ENCODABLE_PERF), st.integers(-(2**15), 2**15 - 1)
    dtype = st.sampled_from(dtypes_for(gen))
    choices = [
        st.builds(LoadStationary, onchip(gen), u8, mask, mask, perf,
                  st.sampled_from(list(Fp32Pass))),
        st.builds(MatMul, onchip(gen), onchip(gen, small=True),
                  st.sampled_from(FLAGS[gen]).map(CalcFlags), dtype, u8, mask, mask, perf,
                  i16, i16, st.sampled_from(list(Fp32Pass))),
        st.builds(DmaLoad, dram_ap(gen), onchip(gen)),
        st.builds(ReadOut, onchip(gen), dram_ap(gen)),
    ]
    if gen == 4:
        fmt = st.sampled_from(dtypes_for(4, mx_only=True))
        choices += [
            st.builds(LdWeightMx, onchip(4), onchip(4), u8, mask, fmt),
            st.builds(MatmultMx, onchip(4), onchip(4), onchip(4),
                      st.sampled_from(FLAGS[4]).map(CalcFlags),
                      fmt, fmt, mask, u8),
        ]
    return st.one_of(choices)


@st.composite
def program(draw: st.DrawFn) -> tuple[int, Program]:
    gen = draw(st.sampled_from([2, 3, 4]))
    return gen, Program(draw(st.lists(instruction(gen), min_size=1, max_size=4)))


@settings(max_examples=200, deadline=None)
@given(program())
def test_random_instructions_round_trip(gp: tuple[int, Program]) -> None:
    gen, p = gp
    data = encode_program(p, gen)
    assert len(data) == B * len(p)
    assert decode_program(data, gen) == p


# -- corrupted bytes ---------------------------------------------------------------------
def _stream(gen: int) -> bytes:
    arch = {2: "trn1", 3: "trn2", 4: "trn3"}[gen]
    p = lower(MatmulSpec(96, 200, 40, "bf16"), get_arch(arch)).program
    extra = list(mx_pair()) if gen == 4 else []
    return encode_program(Program([*p.instructions[:6], matmul(), *extra]), gen)


STREAMS = {g: _stream(g) for g in (2, 3, 4)}


@settings(max_examples=400, deadline=None, suppress_health_check=[HealthCheck.too_slow])
@given(st.sampled_from([2, 3, 4]), st.data())
def test_one_flipped_byte_is_caught(gen: int, data: st.DataObject) -> None:
    good = STREAMS[gen]
    pos = data.draw(st.integers(0, len(good) - 1))
    bad = bytearray(good)
    bad[pos] ^= data.draw(st.integers(1, 255))
    try:
        p = decode_program(bytes(bad), gen)
    except BundleError as e:
        assert 0 <= e.offset < len(bad)
        assert e.offset // B == pos // B  # the error names the corrupted bundle
    else:  # only a different-but-valid value may decode, and then it is what the bytes say
        assert encode_program(p, gen) == bytes(bad)


@settings(max_examples=400, deadline=None)
@given(st.sampled_from([2, 3, 4]), st.data())
def test_resealed_corruption_never_decodes_wrongly(gen: int, data: st.DataObject) -> None:
    """Change up to three payload bytes of one bundle and fix its check byte, so the field
    checks alone must catch it: BundleError inside that bundle, or a Program that encodes
    back to exactly these bytes (a different-but-valid value)."""
    good = STREAMS[gen]
    base = B * data.draw(st.integers(0, len(good) // B - 1))
    bad = bytearray(good)
    for _ in range(data.draw(st.integers(1, 3))):
        bad[base + data.draw(st.integers(4, B - 1))] = data.draw(st.integers(0, 255))
    bad = reseal(bad, base)
    try:
        p = decode_program(bytes(bad), gen)
    except BundleError as e:
        assert base <= e.offset < base + B
    else:
        assert encode_program(p, gen) == bytes(bad)


@pytest.mark.parametrize("gen", [2, 3, 4])
def test_every_single_byte_change_is_an_error(gen: int) -> None:
    """The check byte makes any one changed byte detectable (docs/bundles.md)."""
    good = STREAMS[gen]
    for base in range(0, len(good), B):
        for pos in range(B):
            bad = bytearray(good[base:base + B])
            bad[pos] ^= 0x5A
            with pytest.raises(BundleError):
                decode_program(bytes(bad), gen)


@settings(max_examples=100, deadline=None)
@given(st.sampled_from([2, 3, 4]), st.data())
def test_truncated_stream(gen: int, data: st.DataObject) -> None:
    good = STREAMS[gen]
    cut = data.draw(st.integers(1, len(good) - 1).filter(lambda n: n % B))
    with pytest.raises(BundleError) as err:
        decode_program(good[:cut], gen)
    assert err.value.offset == cut - cut % B < cut


def _matmul_bytes(gen: int) -> bytearray:
    return bytearray(encode_program(Program([matmul()]), gen))


def _error(data: bytes | bytearray, gen: int) -> BundleError:
    with pytest.raises(BundleError) as err:
        decode_program(bytes(data), gen)
    return err.value


@pytest.mark.parametrize("sealed", [False, True])
def test_unknown_opcode(sealed: bool) -> None:
    buf = _matmul_bytes(3)
    struct.pack_into("<H", buf, 0, 0x7F7F)
    err = _error(reseal(buf, 0) if sealed else buf, 3)
    assert err.offset == 0 and "opcode" in err.message


@pytest.mark.parametrize(("gen", "byte"), [(2, 4), (2, 8), (3, 8), (3, 0x80), (4, 5), (4, 7)])
def test_bad_calc_flags(gen: int, byte: int) -> None:
    buf = _matmul_bytes(gen)
    buf[0x2B] = byte
    err = _error(reseal(buf, 0), gen)
    assert err.offset == 0x2B and "calc flag" in err.message


@pytest.mark.parametrize(("gen", "byte"), [(2, 0x7E), (2, 0x0E), (2, 0x10), (4, 0x05),
                                           (3, 0x00), (4, 0x83)])
def test_bad_dtype_code(gen: int, byte: int) -> None:
    """0x0E (E8M0) is gen4 only; fp4 is 0x10 on gen4 and 0x05 before (seed 000)."""
    buf = _matmul_bytes(gen)
    buf[0x15] = byte  # the moving pattern's dtype byte
    err = _error(reseal(buf, 0), gen)
    assert err.offset == 0x15 and "dtype" in err.message


def test_inconsistent_fields() -> None:
    buf = _matmul_bytes(2)
    buf[0x2E] = 4  # normalised column group of 4 is 1
    assert _error(reseal(buf, 0), 2).offset == 0x2E
    buf = _matmul_bytes(2)
    buf[0x27] += 1  # num_active_cols
    assert _error(reseal(buf, 0), 2).offset == 0x27
    buf = bytearray(encode_program(Program(list(mx_pair())), 4))
    buf[B + 0x2D] = 0x03  # the MX column group is forced to 0x0F
    assert _error(reseal(buf, B), 4).offset == B + 0x2D


def test_reserved_byte_and_check_byte() -> None:
    buf = _matmul_bytes(3)
    buf[0x20] = 1
    assert _error(reseal(buf, 0), 3).offset == 0x20
    buf = _matmul_bytes(3)
    buf[0x1A] ^= 1  # zp_moving: still a valid value, caught by the check byte
    err = _error(buf, 3)
    assert err.offset == 3 and "check byte" in err.message


def test_wrong_generation_and_mx_on_gen3() -> None:
    err = _error(_matmul_bytes(3), 2)
    assert err.offset == 2 and "gen3" in err.message
    buf = bytearray(encode_program(Program(list(mx_pair())), 4))
    buf[2] = 3
    err = _error(reseal(buf, 0), 3)
    assert err.offset == 0 and "gen4 only" in err.message


# -- encode errors -----------------------------------------------------------------------
@pytest.mark.parametrize("mode", [PerfMode.DOUBLE_COLUMN, PerfMode.DOUBLE_PIXEL])
def test_double_column_and_pixel_have_no_encoding(mode: PerfMode) -> None:
    ins = matmul(mode)
    with pytest.raises(BundleError, match="no encoding is known") as err:
        encode_program(Program([matmul(), ins]), 3)
    assert err.value.offset == B + 0x21
    ld = LoadStationary(sbuf(0, 32, 0, ((1, 32),)), row_group=1, col_group=1, perf_mode=mode)
    with pytest.raises(BundleError, match="no encoding is known"):
        encode_program(Program([ld]), 2)
    buf = _matmul_bytes(3)
    buf[0x21] = int(mode)
    with pytest.raises(BundleError, match="no encoding is known"):
        decode_program(bytes(reseal(buf, 0)), 3)


@pytest.mark.parametrize(("change", "offset"), [
    ({"zp_moving": 40000}, 0x1A),
    ({"moving": sbuf(0, 32, 0, ((40000, 2),))}, 0x08),
    ({"moving": sbuf(0, 32, 1 << 18, ((1, 2),))}, 0x04),
    ({"dst": psum(0, 32, 1 << 15, 2)}, 0x30),
    ({"moving": sbuf(0, 300, 0, ((1, 2),))}, 0x14),
    ({"moving": dram(0, 32, 64, ((1, 2),))}, 0x04),
    ({"flags": CalcFlags.ACCUMULATE}, 0x2B),
    ({"row_group": 5}, 0x24),
    ({"fp32_pass": 3}, 0x1E),
    ({"stationary_dtype": "e8m0"}, 0x18),
])
def test_values_that_do_not_fit_raise_at_encode(change: dict[str, object], offset: int) -> None:
    ins = dataclasses.replace(matmul(), **change)  # type: ignore[arg-type]
    with pytest.raises(BundleError) as err:
        encode_program(Program([matmul(), ins]), 2)
    assert err.value.offset == B + offset and "instruction 1" in err.value.message


def test_mx_is_gen4_only_and_generation_is_checked() -> None:
    ld, _ = mx_pair()
    for gen in (2, 3):
        with pytest.raises(BundleError, match="gen4 only"):
            encode_program(Program([ld]), gen)
    with pytest.raises(ArchError):
        encode_program(Program([]), 5)
    with pytest.raises(ArchError):
        decode_program(b"", 1)
    assert decode_program(b"", 2) == Program([])


# -- instruction fields the layout does not know ------------------------------------------
@pytest.mark.parametrize("gen", [2, 3, 4])
def test_every_instruction_field_has_a_position(gen: int) -> None:
    from systolic.compiler import bundle

    for cls in (LoadStationary, MatMul, DmaLoad, ReadOut, *((LdWeightMx, MatmultMx) * (gen == 4))):
        lay = bundle.layout(cls, gen)
        assert lay.problem == "", lay.problem


def test_a_new_field_encodes_only_at_its_default(monkeypatch: pytest.MonkeyPatch) -> None:
    """isa's MX instructions are provisional: a field added with a default round-trips at
    its default and is refused otherwise, with a sentence naming it."""
    from systolic.compiler import bundle

    ext = dataclasses.make_dataclass(
        "MatmultMxExt", [("block", int, dataclasses.field(default=32))], bases=(MatmultMx,),
        frozen=True)
    monkeypatch.setattr(bundle, "OPCODES", {**bundle.OPCODES, ext: 0x100B})
    monkeypatch.setattr(bundle, "_BY_OPCODE", {**bundle._BY_OPCODE, 0x100B: ext})
    monkeypatch.setattr(bundle, "_BUILDERS", {**bundle._BUILDERS, ext: bundle._matmult_mx})
    _, mm = mx_pair()
    fields = {f.name: getattr(mm, f.name) for f in dataclasses.fields(mm)}
    ins = ext(**fields)
    assert decode_program(encode_program(Program([ins]), 4), 4) == Program([ins])
    with pytest.raises(BundleError, match="field block = 64 has no position"):
        encode_program(Program([ext(**fields, block=64)]), 4)


# -- one rule for the calc byte, read by the verifier and the encoder --------------------
def _verify_flags_problem(flags: CalcFlags, arch: Arch) -> str:
    """The verifier's complaint about ``flags`` on a lone latched MatMul, or ""."""
    ld = LoadStationary(sbuf(32, 32, 0, ((1, 32),)), 64, row_group(32, 32), col_group(64, 32))
    try:
        verify(Program([ld, dataclasses.replace(matmul(), flags=flags)]), arch)
    except VerifyError as exc:
        if exc.index == 1 and ("ACCUMULATE bit" in exc.message
                               or "accumulate byte" in exc.message):
            return exc.message
    return ""


@pytest.mark.parametrize("arch", ["trn1", "trn2", "trn3"])
@pytest.mark.parametrize("value", range(8))
def test_verifier_and_encoder_agree_on_every_calc_byte(arch: str, value: int) -> None:
    # seed 000: gen2 writes START/STOP only; gen3 the 3-bit field; gen4 {0,1,2,3,4,6}
    seed_bytes = {2: range(4), 3: range(8), 4: (0, 1, 2, 3, 4, 6)}
    a = get_arch(arch)
    flags = CalcFlags(value)
    refused_by_verify = bool(_verify_flags_problem(flags, a))
    try:
        encode_program(Program([dataclasses.replace(matmul(), flags=flags)]), a)
        refused_by_encoder = False
    except BundleError as exc:
        assert exc.offset == 0x2B
        refused_by_encoder = True
    assert refused_by_verify == refused_by_encoder == (value not in seed_bytes[a.generation])


@pytest.mark.parametrize("value", [5, 7])
def test_gen4_dense_calc_byte_5_and_7_are_refused_by_verify(value: int) -> None:
    assert "accumulate byte" in _verify_flags_problem(CalcFlags(value), get_arch("trn3"))


def test_gen3_above_arch_level_40_never_writes_the_calc_byte() -> None:
    # seed 000 QUIRK: generateMatMulAccumulateFlag returns without touching +0x2B above
    # level 40; the encoder refuses rather than write the byte, naming the memset path
    high = dataclasses.replace(get_arch("trn2"), arch_level=41)
    with pytest.raises(BundleError, match=r"does not write the calc byte \+0x2B") as err:
        encode_program(Program([matmul()]), high)
    assert err.value.offset == 0x2B and "explicit-memset" in err.value.message
    data = encode_program(Program([matmul()]), get_arch("trn2"))  # level 30: written
    assert data[0x2B] == int(CalcFlags.START | CalcFlags.STOP)
    with pytest.raises(BundleError, match="does not write the calc byte"):
        decode_program(data, high)
    # instructions without a calc byte encode at any level, identically
    ld = LoadStationary(sbuf(32, 32, 0, ((1, 32),)), 64, row_group(32, 32), col_group(64, 32))
    assert encode_program(Program([ld]), high) == encode_program(Program([ld]), 3)
    assert decode_program(encode_program(Program([ld]), high), high) == Program([ld])


# -- the documented table is the encoder's table ----------------------------------------
def test_docs_bundle_tables_are_the_layouts() -> None:
    # docs/bundles.md carries the generated tables; a field moved in bundle.py (or the doc
    # edited by hand) fails here until `python3 -m systolic.compiler.bundle_doc --write
    # docs/bundles.md` is run and the diff reviewed, so every offset is pinned.
    doc = (Path(__file__).resolve().parents[1] / "docs" / "bundles.md").read_text()
    start, end = doc.index(bundle_doc.BEGIN), doc.index(bundle_doc.END)
    assert doc[start:end + len(bundle_doc.END) + 1] == bundle_doc.layout_tables()
    assert bundle_doc.splice(doc) == doc


def test_doc_offsets_match_the_bytes_written() -> None:
    # independent of the layout objects: each documented field's bytes change when (and
    # only when) that field's value changes in an encoded MatMul (gen3)
    base = encode_program(Program([matmul()]), 3)
    changes = {0x1A: {"zp_moving": 7}, 0x1C: {"zp_stationary": 7},
               0x19: {"stationary_partition": 7}, 0x1E: {"fp32_pass": Fp32Pass.LO},
               0x21: {"perf_mode": PerfMode.DOUBLE_ROW_SW_INTERLEAVE},
               0x2B: {"flags": CalcFlags.START}}
    for off, change in changes.items():
        got = encode_program(Program([dataclasses.replace(matmul(), **change)]), 3)
        diff = {i for i in range(4, B) if got[i] != base[i]}
        assert min(diff) == off, (change, sorted(diff))
        assert f"| +0x{off:02X} |" in bundle_doc.layout_tables()
