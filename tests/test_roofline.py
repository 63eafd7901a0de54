"""The roofline places each op by its measured arithmetic intensity (FLOPs per HBM byte the
Program's DMAs actually move) and its whole-core rate, and no point is ever above a roof:
over many shapes and formats on every arch."""

from __future__ import annotations

from pathlib import Path

import pytest

from systolic.arch import ARCHS, get_arch
from systolic.commands.roofline import roofline_data
from systolic.isa import DmaCopy, DmaLoad, ReadOut, Space
from systolic.workload import evaluate, load_workload

# (M, K, N): square, small K, small M, small N, ragged, deep K, one tile
SHAPES = ((512, 512, 512), (1024, 64, 1024), (64, 1024, 1024), (1024, 1024, 32),
          (300, 200, 700), (128, 4096, 256), (128, 128, 128))


def formats(arch_name: str) -> list[tuple[str, str]]:
    """(dtype, perf mode) of every format the arch's matmul runs."""
    arch = get_arch(arch_name)
    out = [(f, "none") for f in arch.formats]
    if arch.supports_perf_mode("double_row"):
        out.append(("fp8_e4m3", "double_row"))
    out += [(f, "none") for f in arch.mx_formats]
    return out


def hbm_bytes(program) -> int:
    """Bytes the Program moves to or from device memory, counted from its instructions
    (every DMA and every ReadOut's store touching DRAM), independently of the timing."""
    total = 0
    for ins in program:
        if isinstance(ins, DmaLoad | DmaCopy | ReadOut):
            src, dst = ins.src, ins.dst
            if Space.DRAM in (src.space, dst.space):
                total += dst.partitions * dst.free_elems * dst.itemsize
    return total


@pytest.mark.parametrize("arch", list(ARCHS))
def test_no_point_is_above_a_roof(arch: str, tmp_path: Path) -> None:
    ops = [f"  - {{name: {dt}_{mode}_{m}x{k}x{n}, m: {m}, k: {k}, n: {n}, dtype: {dt}, "
           f"perf_mode: {mode}}}"
           for dt, mode in formats(arch) for m, k, n in SHAPES]
    f = tmp_path / "w.yaml"
    f.write_text(f"name: roofs\ndefaults: {{arch: {arch}}}\nops:\n" + "\n".join(ops) + "\n")
    results = evaluate(load_workload(f))
    data = roofline_data(arch, results)
    bw = data["hbm_bytes_per_s"]
    roofs = {(r["dtype"], r["perf_mode"]): r["peak_tflops"] for r in data["roofs"]}
    assert len(data["points"]) == len(results) == len(ops)
    for p, r in zip(data["points"], results, strict=True):
        m, k, n = p["m"], p["k"], p["n"]
        moved = hbm_bytes(r.program)
        # measured intensity: the product's FLOPs (closed form) over the bytes moved
        assert moved > 0 and r.report.core.hbm_bytes == moved
        assert p["intensity"] == pytest.approx(2 * m * k * n / moved, rel=1e-12)
        assert p["hbm_bound_tflops"] == pytest.approx(p["intensity"] * bw / 1e12, rel=1e-12)
        assert p["peak_tflops"] == pytest.approx(
            get_arch(arch).peak_flops(p["dtype"], p["perf_mode"]) / 1e12)
        # under the HBM slope and under its own format's roof (and so under every roof
        # drawn for that format family)
        assert p["tflops"] <= p["hbm_bound_tflops"] * (1 + 1e-12), p["name"]
        assert p["tflops"] <= p["peak_tflops"] * (1 + 1e-12), p["name"]
        fam = roofs.get((p["dtype"], p["perf_mode"]))
        if fam is not None:
            assert p["tflops"] <= fam * (1 + 1e-12)
        assert p["tflops"] > 0


def test_every_ceiling_is_labelled_and_under_the_bf16_roof() -> None:
    from systolic.views.plots import _clusters, ceiling_label

    for arch in ARCHS:
        data = roofline_data(arch)
        bf16 = next(r for r in data["roofs"] if r["name"] == "bf16")["peak_tflops"]
        labels = "\n".join(ceiling_label(g) for g in _clusters(data["ceilings"], "tflops"))
        for c in data["ceilings"]:
            assert 0 < c["tflops"] <= bf16
            assert f"{c['name']}: {c['tflops']:.1f} TFLOP/s ({c['what']})" in labels


@pytest.mark.parametrize(("arch", "m", "k", "n", "dtype"), [
    ("trn2", 8192, 8192, 8192, "bf16"),   # timed from a slice of its M tiles
    ("trn1", 8192, 64, 8192, "bf16"),     # small K: far left of the ridge
    ("trn2", 16384, 1024, 4096, "fp8_e4m3"),
    ("inf2", 4096, 4096, 4096, "fp32"),
    ("trn3", 300, 200, 700, "mxfp8_e4m3"),
])
def test_a_products_point_is_under_the_roofs(arch: str, m: int, k: int, n: int,
                                              dtype: str) -> None:
    """``systolic matmul --json``'s intensity and tflops (the keys the roofline reads) on
    the same path the command takes, large products extrapolated from a slice included."""
    from systolic.api import make_spec
    from systolic.extrapolate import matmul_report
    from systolic.views.report import report_fields

    a = get_arch(arch)
    rep, _ = matmul_report(make_spec(m, k, n, dtype, a), a)
    d = report_fields(rep)
    assert d["tflops"] <= d["peak_tflops"] * (1 + 1e-12)
    assert d["tflops"] <= d["intensity"] * a.hbm_bytes_per_s / 1e12 * (1 + 1e-12)
    # the whole core never moves less than the operands once
    fmt_bytes = {"bf16": 2, "fp8_e4m3": 1, "fp32": 4, "mxfp8_e4m3": 1}[dtype]
    assert d["dma"]["hbm_bytes"] >= (m * k + k * n) * fmt_bytes
