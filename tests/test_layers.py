"""The package's layers (docs/DESIGN-NOTES.md "The layout"): every module imports only
modules of its own layer or below, so the tree shows the data flow. Lazy imports inside
functions count; imports under ``if TYPE_CHECKING:`` do not (they run only in a checker)."""

from __future__ import annotations

import ast
from pathlib import Path

import pytest

import systolic

PKG = Path(systolic.__file__).parent

# lowest first; a unit is a top-level module or a subpackage of systolic
LAYERS: list[set[str]] = [
    {"errors", "geometry", "version", "collector"},
    {"dtypes", "artifacts", "yaml_source"},
    {"isa"},
    {"arch", "mx"},
    {"memory", "executor"},
    {"verify"},
    {"timing"},
    {"sim", "compiler", "schema"},
    {"views"},
    {"api", "extrapolate"},
    {"workload", "nki", "rtl"},
    {"sweep"},
    {"commands", "cli", "__main__", "__init__"},
]
RANK = {unit: i for i, layer in enumerate(LAYERS) for unit in layer}
# inside the ISA package, the same rule one level down (issue 14's ISA layering)
ISA_RANK = {"fields": 0, "instructions": 1, "generation": 1, "asm": 2, "program": 3,
            "__init__": 4}


def _modules() -> list[Path]:
    return sorted(PKG.rglob("*.py"))


def _name(path: Path) -> list[str]:
    parts = list(path.relative_to(PKG.parent).with_suffix("").parts)
    return parts


def _imports(path: Path) -> list[tuple[str, int]]:
    """(absolute module, line) of every systolic import outside TYPE_CHECKING blocks."""
    parts = _name(path)
    is_pkg = parts[-1] == "__init__"
    here = parts[:-1]
    out: list[tuple[str, int]] = []

    def visit(node: ast.AST) -> None:
        for child in ast.iter_child_nodes(node):
            if isinstance(child, ast.If) and "TYPE_CHECKING" in ast.unparse(child.test):
                for sub in child.orelse:
                    visit(sub)
                continue
            if isinstance(child, ast.ImportFrom):
                if child.level:
                    base = here[: len(here) - (child.level - 1)]
                    mod = ".".join(base + ([child.module] if child.module else []))
                else:
                    mod = child.module or ""
                if mod.startswith("systolic"):
                    if child.module is None:
                        out.extend((f"{mod}.{a.name}", child.lineno) for a in child.names)
                    else:
                        out.append((mod, child.lineno))
            elif isinstance(child, ast.Import):
                out.extend((a.name, child.lineno) for a in child.names
                           if a.name.startswith("systolic"))
            visit(child)

    del is_pkg
    visit(ast.parse(path.read_text(encoding="utf-8")))
    return out


def _unit(parts: list[str]) -> str:
    return parts[1] if len(parts) > 1 else "__init__"


def test_every_unit_has_a_layer() -> None:
    units = {_unit(_name(p)) for p in _modules()}
    assert units <= set(RANK), f"give these a layer: {sorted(units - set(RANK))}"


@pytest.mark.parametrize("path", _modules(), ids=lambda p: str(p.relative_to(PKG)))
def test_imports_go_down(path: Path) -> None:
    me = _unit(_name(path))
    bad = []
    for mod, line in _imports(path):
        parts = mod.split(".")
        other = _unit(parts)
        if other == "__version__":
            other = "__init__"
        if other == me or other not in RANK:
            continue
        if RANK[other] > RANK[me]:
            bad.append(f"line {line}: {me} (layer {RANK[me]}) imports {mod} "
                       f"(layer {RANK[other]})")
    assert not bad, "\n".join(bad)


@pytest.mark.parametrize("path", sorted((PKG / "isa").glob("*.py")), ids=lambda p: p.stem)
def test_isa_layers_import_only_below_them(path: Path) -> None:
    me = path.stem
    for mod, line in _imports(path):
        parts = mod.split(".")
        if len(parts) > 2 and parts[1] == "isa":
            other = parts[2]
            assert ISA_RANK[other] < ISA_RANK[me], f"isa/{me}.py:{line} imports isa.{other}"
        else:
            assert _unit(parts) in LAYERS[0] | LAYERS[1], f"isa/{me}.py:{line} imports {mod}"
