"""Output files: atomic over regular files, written through symlinks, never over anything
else; the same for every writer of the package (issue 13, 3.1)."""

from __future__ import annotations

import os
import stat
from pathlib import Path

import pytest
from helpers import require_module

from systolic.artifacts import ArtifactError, check_artifact_path, open_artifact, write_text
from systolic.cli import main

EXAMPLE = str(Path(__file__).parent.parent / "examples" / "seed003_2048.yaml")


def leftovers(folder: Path) -> list[str]:
    return sorted(p.name for p in folder.iterdir() if p.name.startswith("."))


def test_new_file_gets_the_umask_mode(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    umask = os.umask(0o022)
    try:
        write_text(out, "hello")
    finally:
        os.umask(umask)
    assert out.read_text() == "hello"
    assert stat.S_IMODE(out.stat().st_mode) == 0o644  # what open() would give, not 0600
    assert leftovers(tmp_path) == []


def test_regular_file_is_replaced_and_keeps_its_mode(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("old")
    out.chmod(0o600)
    write_text(out, "new")
    assert out.read_text() == "new"
    assert stat.S_IMODE(out.stat().st_mode) == 0o600


def test_failure_inside_leaves_the_old_file(tmp_path: Path) -> None:
    out = tmp_path / "a.txt"
    out.write_text("old")
    with pytest.raises(RuntimeError), open_artifact(out) as f:
        f.write("half")
        raise RuntimeError("boom")
    assert out.read_text() == "old"
    assert leftovers(tmp_path) == []


def test_symlink_is_written_through(tmp_path: Path) -> None:
    target = tmp_path / "real.json"
    target.write_text("old")
    link = tmp_path / "link.json"
    link.symlink_to(target)
    write_text(link, "new")
    assert link.is_symlink() and os.readlink(link) == str(target)  # still the same link
    assert target.read_text() == "new"


def test_dangling_symlink_creates_its_target(tmp_path: Path) -> None:
    link = tmp_path / "link.json"
    link.symlink_to(tmp_path / "made.json")
    write_text(link, "x")
    assert link.is_symlink() and (tmp_path / "made.json").read_text() == "x"


def test_fifo_is_refused_and_left_alone(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    with pytest.raises(ArtifactError, match=r"pipe: is a FIFO") as info:
        write_text(fifo, "x", "trace")
    assert "\n" not in str(info.value) and ".tmp" not in str(info.value)
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert leftovers(tmp_path) == []


def test_symlink_to_a_fifo_is_refused(tmp_path: Path) -> None:
    fifo = tmp_path / "pipe"
    os.mkfifo(fifo)
    link = tmp_path / "link"
    link.symlink_to(fifo)
    with pytest.raises(ArtifactError, match="the link points to"):
        write_text(link, "x")
    assert link.is_symlink() and stat.S_ISFIFO(fifo.lstat().st_mode)


def test_directory_error_names_the_users_path(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError) as info:
        write_text(tmp_path, "x", "trace")
    msg = str(info.value)
    assert msg.startswith(f"{tmp_path}: is a directory") and ".tmp" not in msg


@pytest.mark.parametrize("device", ["/dev/null", "/dev/full"])
def test_device_is_refused_without_touching_it(device: str) -> None:
    """Devices only by a read-only check: stat says each is a character device. /dev/null is
    on every POSIX system; /dev/full (the issue's reproduction) on Linux, where CI runs."""
    with pytest.raises(ArtifactError, match="character device"):
        check_artifact_path(device, "trace")


def test_empty_path_and_missing_folder(tmp_path: Path) -> None:
    with pytest.raises(ArtifactError, match="path is empty"):
        write_text("", "x", "trace")
    with pytest.raises(ArtifactError, match="does not exist"):
        write_text(tmp_path / "no" / "a.json", "x")


# Every writer of the CLI: (argv with {out} for the path, the file name, needs amaranth).
WRITERS = [
    (["matmul", "128", "128", "128", "--trace", "{out}"], "t.json", False),
    (["matmul", "128", "128", "128", "--timeline", "{out}"], "t.png", False),
    (["step", "3", "3", "3", "--html", "{out}"], "s.html", False),
    (["run", EXAMPLE, "--loss-bar", "{out}"], "l.svg", False),
    (["run", EXAMPLE, "--timeline", "{out}"], "t.png", False),
    (["roofline", "-o", "{out}"], "r.png", False),
    (["rtl", "verilog", "--rows", "2", "--cols", "2", "-o", "{out}"], "a.v", True),
    (["rtl", "sim", "--rows", "2", "--cols", "2", "--cycles", "4", "--vcd", "{out}"], "w.vcd",
     True),
]
IDS = [" ".join(a[:2]) + " " + a[a.index("{out}") - 1] for a, _, _ in WRITERS]


@pytest.mark.parametrize(("argv", "name", "rtl"), WRITERS, ids=IDS)
def test_every_writer_refuses_a_fifo(tmp_path: Path, capsys: pytest.CaptureFixture[str],
                                     argv: list[str], name: str, rtl: bool) -> None:
    if rtl:
        require_module("amaranth", "amaranth (the rtl commands)")
    fifo = tmp_path / name
    os.mkfifo(fifo)
    code = None
    try:
        code = main([str(fifo) if a == "{out}" else a for a in argv])
    except SystemExit as exc:  # refused while parsing, before the work
        code = exc.code
    assert code == 2
    err = capsys.readouterr().err
    assert err.count("\n") == 1 and err.startswith("systolic: error: ")
    assert f"{fifo}: is a FIFO" in err
    assert stat.S_ISFIFO(fifo.lstat().st_mode)
    assert leftovers(tmp_path) == []


@pytest.mark.parametrize(("argv", "name", "rtl"), WRITERS, ids=IDS)
def test_every_writer_writes_through_a_symlink(tmp_path: Path,
                                               capsys: pytest.CaptureFixture[str],
                                               argv: list[str], name: str, rtl: bool) -> None:
    if rtl:
        require_module("amaranth", "amaranth (the rtl commands)")
    target = tmp_path / ("real" + Path(name).suffix)
    link = tmp_path / name
    link.symlink_to(target)
    assert main([str(link) if a == "{out}" else a for a in argv]) == 0
    assert link.is_symlink() and target.stat().st_size > 0
    out = capsys.readouterr()
    assert f"wrote {link}" in out.out + out.err  # every writer says what it wrote


def test_empty_path_is_an_error_not_a_no_op(capsys: pytest.CaptureFixture[str]) -> None:
    for argv in (["matmul", "128", "128", "128", "--trace", ""],
                 ["step", "3", "3", "3", "--html", ""], ["roofline", "-o", ""]):
        with pytest.raises(SystemExit) as exc:
            main(argv)
        assert exc.value.code == 2
        assert "empty" in capsys.readouterr().err
