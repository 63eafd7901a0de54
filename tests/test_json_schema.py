"""One JSON shape (issue 22): the Tensor Engine under ``pe``, the whole core under ``core``,
the same names in ``matmul``, ``run``, ``kernel`` --json and in their traces' metadata, and
a documented ``schema`` version. Figures are checked against closed forms (2MKN, the
array's peak from rows x cols x clock) and against sums written here, not against the
code's own earlier output."""

from __future__ import annotations

import json
import re
from pathlib import Path

import pytest

from systolic.arch import get_arch
from systolic.cli import main

ROOT = Path(__file__).resolve().parents[1]
TILED = f"{ROOT / 'examples' / 'kernels' / 'tiled_matmul.py'}:tiled_matmul"
PE_KEYS = {"cycles", "seconds", "tflops", "peak_tflops", "utilization", "useful_macs",
           "breakdown", "readout_tail"}
CORE_KEYS = {"latency_us", "tflops", "peak_tflops", "hfu", "engines", "dma", "bound",
             "intensity"}
# the four kinds of docs/json.md, written out here (not read from systolic.schema)
KINDS = {"pe": ("pe", "weight_load"), "dma": ("dma", "dma_latency"),
         "engines": ("psum_evacuation", "vector", "scalar", "gpsimd"),
         "sync": ("sync", "idle")}


def run_json(capsys: pytest.CaptureFixture[str], *argv: str) -> dict:
    assert main([*argv, "--json"]) == 0
    return json.loads(capsys.readouterr().out)


def check_pe(pe: dict, m: int, k: int, n: int, arch: str) -> None:
    a = get_arch(arch)
    assert set(pe) == PE_KEYS
    assert pe["useful_macs"] == m * k * n
    assert pe["seconds"] == pytest.approx(pe["cycles"] / a.clock_hz)
    assert pe["tflops"] == pytest.approx(2 * m * k * n / pe["seconds"] / 1e12)
    # bf16: pack 1, so utilization is MACs over cycles x rows x cols
    assert pe["utilization"] == pytest.approx(m * k * n / (pe["cycles"] * a.rows * a.cols))
    assert pe["peak_tflops"] == pytest.approx(2 * a.rows * a.cols * a.clock_hz / 1e12)
    parts = pe["breakdown"]
    assert sum(p["cycles"] for p in parts.values()) == pytest.approx(pe["cycles"])
    assert sum(p["percent"] for p in parts.values()) == pytest.approx(100.0)


def check_core(core: dict, flops: int, arch: str) -> None:
    a = get_arch(arch)
    assert set(core) == CORE_KEYS
    seconds = core["latency_us"] * 1e-6
    assert core["tflops"] == pytest.approx(flops / seconds / 1e12)
    peak = 2 * a.rows * a.cols * a.clock_hz / 1e12
    assert core["hfu"] == pytest.approx(core["tflops"] / peak)
    assert core["intensity"] == pytest.approx(flops / core["dma"]["hbm_bytes"])
    assert core["dma"]["gbps"] == pytest.approx(core["dma"]["hbm_bytes"] / seconds / 1e9)
    bound = core["bound"]
    assert set(bound) == {"by", "kind", "causes"}
    us = {c: v["us"] for c, v in bound["causes"].items()}
    assert sum(us.values()) == pytest.approx(core["latency_us"])
    assert bound["by"] == max(us, key=lambda c: us[c])
    share = {kind: sum(us[c] for c in cs) for kind, cs in KINDS.items()}
    assert bound["kind"] == max(share, key=lambda kd: share[kd])
    for q in core["engines"].values():
        assert 0.0 <= q["busy"] <= 1.0


def test_matmul_json_has_both_views_and_the_schema(capsys: pytest.CaptureFixture[str],
                                                   tmp_path: Path) -> None:
    trace = tmp_path / "t.json"
    out = run_json(capsys, "matmul", "256", "384", "640", "--trace", str(trace))
    assert out["schema"] == 2
    check_pe(out["pe"], 256, 384, 640, "trn2")
    check_core(out["core"], 2 * 256 * 384 * 640, "trn2")
    # schema 1's flat keys are kept for one release (docs/json.md), read the same figures
    assert out["pe_tflops"] == out["pe"]["tflops"] and out["cycles"] == out["pe"]["cycles"]
    assert out["latency_us"] == out["core"]["latency_us"]
    meta = json.loads(trace.read_text())["otherData"]
    assert (meta["schema"], meta["pe"], meta["core"]) == (2, out["pe"], out["core"])


def test_run_json_per_op_and_total(capsys: pytest.CaptureFixture[str], tmp_path: Path
                                   ) -> None:
    wl = tmp_path / "w.yaml"
    wl.write_text("ops:\n  - {name: a, m: 256, k: 256, n: 512, repeat: 3}\n"
                  "  - {name: b, m: 128, k: 512, n: 256}\n")
    out = run_json(capsys, "run", str(wl))
    assert out["schema"] == 2
    a, b = out["ops"]
    check_pe(a["pe"], 256, 256, 512, "trn2")
    check_pe(b["pe"], 128, 512, 256, "trn2")
    check_core(a["core"], 2 * 256 * 256 * 512, "trn2")
    total = out["total"]
    assert set(total["pe"]) == PE_KEYS and set(total["core"]) == CORE_KEYS
    assert total["pe"]["cycles"] == 3 * a["pe"]["cycles"] + b["pe"]["cycles"]
    assert a["pe"]["readout_tail"] > 0  # so the next line tests the repeat
    assert total["pe"]["readout_tail"] == 3 * a["pe"]["readout_tail"] + b["pe"]["readout_tail"]
    assert total["pe"]["useful_macs"] == 3 * 256 * 256 * 512 + 128 * 512 * 256
    assert total["core"]["latency_us"] == pytest.approx(
        3 * a["core"]["latency_us"] + b["core"]["latency_us"])
    flops = 2 * (3 * 256 * 256 * 512 + 128 * 512 * 256)
    check_core(total["core"], flops, "trn2")


def test_kernel_json_and_trace_carry_the_same_names(capsys: pytest.CaptureFixture[str],
                                                    tmp_path: Path) -> None:
    trace = tmp_path / "k.json.gz"
    out = run_json(capsys, "kernel", TILED, "--arg", "lhsT=bf16[256,128]", "--arg",
                   "rhs=bf16[256,512]", "--trace", str(trace))
    assert out["schema"] == 2
    # lhsT [K, M], rhs [K, N]: M = 128, K = 256, N = 512
    check_pe(out["pe"], 128, 256, 512, "trn2")
    check_core(out["core"], 2 * 128 * 256 * 512, "trn2")
    assert out["bound"]["kind"] == out["core"]["bound"]["kind"]  # the flat key agrees
    import gzip

    meta = json.loads(gzip.decompress(trace.read_bytes()))["otherData"]
    assert (meta["schema"], meta["pe"], meta["core"]) == (2, out["pe"], out["core"])


def test_kernel_without_matmuls_has_no_pe_view(capsys: pytest.CaptureFixture[str],
                                               tmp_path: Path) -> None:
    k = tmp_path / "copy.py"
    k.write_text("import nki\nimport nki.language as nl\n\n\n@nki.jit\n"
                 "def copy(a):\n    out = nl.ndarray(a.shape, dtype=a.dtype, "
                 "buffer=nl.shared_hbm)\n    nl.store(out, nl.load(a))\n    return out\n")
    out = run_json(capsys, "kernel", f"{k}:copy", "--arg", "a=bf16[128,512]")
    assert out["pe"] is None and out["core"]["latency_us"] > 0


def test_the_schema_version_is_documented() -> None:
    from systolic.schema import SCHEMA_VERSION

    doc = (ROOT / "docs" / "json.md").read_text()
    assert f"(schema {SCHEMA_VERSION})" in doc.splitlines()[0]
    assert f'"schema": {SCHEMA_VERSION}' in doc
    for key in PE_KEYS | CORE_KEYS:
        assert re.search(rf"\| `{key}` \|", doc), key


def test_bound_kind_groups_the_causes_as_documented() -> None:
    from systolic.schema import bound_kind

    # DMA fixed cost is DMA's (5 + 1 = 6 against the PE's 3), weight loads are the PE's
    assert bound_kind({"pe": 3.0, "dma": 1.0, "dma_latency": 5.0}) == "dma"
    assert bound_kind({"pe": 1.0, "weight_load": 5.0, "dma": 4.0}) == "pe"
    assert bound_kind({"psum_evacuation": 2.0, "gpsimd": 2.0, "pe": 3.0}) == "engines"
    assert bound_kind({"idle": 4.0, "sync": 1.0, "vector": 4.0}) == "sync"
    assert bound_kind({}) == "sync"


def test_roofline_json_has_the_schema_and_both_views_per_point(
        capsys: pytest.CaptureFixture[str], tmp_path: Path) -> None:
    """``systolic roofline --json`` (issue 22: the one command left on the flat keys): each
    point carries ``pe`` and ``core`` as ``run`` gives each op, checked against closed forms,
    and agrees with ``systolic run --json`` of the same file."""
    wl = tmp_path / "w.yaml"
    wl.write_text("defaults: {arch: trn1}\nops:\n  - {name: a, m: 256, k: 384, n: 640}\n"
                  "  - {name: b, m: 512, k: 64, n: 1024}\n")
    out = run_json(capsys, "roofline", "--workload", str(wl))
    assert out["schema"] == 2
    shapes = {"a": (256, 384, 640), "b": (512, 64, 1024)}
    run = {op["name"]: op for op in run_json(capsys, "run", str(wl))["ops"]}
    for p in out["points"]:
        m, k, n = shapes[p["name"]]
        check_pe(p["pe"], m, k, n, "trn1")
        check_core(p["core"], 2 * m * k * n, "trn1")
        assert (p["pe"], p["core"]) == (run[p["name"]]["pe"], run[p["name"]]["core"])
        # schema 1's flat keys, kept for one release, read the same figures
        assert p["latency_us"] == p["core"]["latency_us"]
        assert p["pe_tflops"] == p["pe"]["tflops"]
        assert p["bound"] == p["core"]["bound"]["by"]
    a = get_arch("trn1")
    for c in out["ceilings"]:
        assert set(c["pe"]) == PE_KEYS
        assert c["pe"]["useful_macs"] == c["m"] * c["k"] * c["n"]
        assert c["pe"]["tflops"] == pytest.approx(c["tflops"])
        assert c["pe"]["peak_tflops"] == pytest.approx(
            2 * a.rows * a.cols * a.clock_hz * (1 if c["dtype"] == "bf16" else 0.25) / 1e12)


def test_docs_listing_json_keys_point_to_the_schema() -> None:
    """A doc that lists a command's JSON keys sends the reader to docs/json.md, where the
    one shape and its version are (issue 22: timing.md's key list did not)."""
    for doc, heading in (("timing.md", "### JSON keys"),):
        text = (ROOT / "docs" / doc).read_text()
        section = text[text.index(heading):].split("\n#", 1)[0]
        assert "(json.md)" in section, doc
