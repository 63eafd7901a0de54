"""Arch presets: the peaks derived from geometry, clock and rate match the datasheets."""

from __future__ import annotations

import pytest

from systolic import ARCHS, ArchError, get_arch


@pytest.mark.parametrize(("arch", "fmt", "mode", "datasheet"), [
    ("trn1", "bf16", "none", 92), ("trn1", "fp32", "none", 23), ("inf2", "bf16", "none", 92),
    ("trn2", "bf16", "none", 79), ("trn2", "fp8_e4m3", "double_row", 158),
    ("trn2", "fp32", "none", 20), ("trn3", "mxfp8_e4m3", "none", 315),
    ("trn3", "mxfp4", "none", 315), ("trn3", "bf16", "none", 79),
])
def test_peaks_match_the_public_datasheets(arch: str, fmt: str, mode: str,
                                           datasheet: float) -> None:
    # rows x cols x 2 FLOPs x clock x rate (seed 003); AWS rounds (158 = 2 x 79, not 157.3)
    peak = get_arch(arch).peak_flops(fmt, mode) / 1e12
    assert round(peak) == datasheet or abs(peak - datasheet) / datasheet < 0.01


def test_geometry_and_memories() -> None:
    sbuf = {"trn1": 192, "inf2": 192, "trn2": 224, "trn3": 256}
    for name, a in ARCHS.items():
        assert (a.rows, a.cols, a.quadrant) == (128, 128, 32)
        assert a.psum_banks * a.psum_bank_bytes == 16 * 1024  # 2 MiB over 128 partitions
        assert a.psum_bank_bytes // 4 == 512  # one bank holds 512 fp32
        assert a.sbuf_bytes == sbuf[name] * 1024
        assert a.mm_init_latency == 64
    assert get_arch("trn1").clock_hz == 2.8e9 and get_arch("trn2").clock_hz == 2.4e9


def test_generation_gates() -> None:
    assert not get_arch("trn1").supports_perf_mode("double_row")
    assert get_arch("trn2").supports_perf_mode("double_row")
    assert not get_arch("trn2").supports_format("mxfp4")
    assert get_arch("trn3").supports_format("mxfp4")
    assert get_arch("trn3").supports_format("fp8_e4m3fn")
    assert not get_arch("trn2").supports_format("fp8_e4m3fn")
    with pytest.raises(ArchError, match="unknown arch 'trn4'"):
        get_arch("trn4")


def test_an_arch_unpickled_in_another_process_hashes_as_that_process_makes_it(tmp_path):
    # Arch keeps its hash (issue 20); the hash covers strings, whose hashes differ between
    # processes, so an Arch sent to a sweep worker must hash there as one made there
    import os
    import pickle
    import subprocess
    import sys

    blob = tmp_path / "arch.pkl"
    blob.write_bytes(pickle.dumps(get_arch("trn2")))
    code = ("import pickle, sys; from systolic.arch import get_arch; "
            "b = pickle.load(open(sys.argv[1], 'rb')); a = get_arch('trn2'); "
            "print(a == b, hash(a) == hash(b), {a: 1}.get(b))")
    for seed in ("1", "2"):
        out = subprocess.run([sys.executable, "-c", code, str(blob)], capture_output=True,
                             text=True, check=True,
                             env={**os.environ, "PYTHONHASHSEED": seed}).stdout.split()
        assert out == ["True", "True", "1"], seed
