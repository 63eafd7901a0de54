"""Python's ``and`` / ``or`` / ``not`` in a kernel, as NKI reads them.

NKI compiles a kernel from its Python source, so ``mask=(ix < n // 2 and iy < m // 2)``
joins the two comparisons there (aws-neuron-sdk nki/test test_nki_isa_nc_match_replace8.py
does so and checks the part both select). Here the kernel runs as Python, where ``and``
asks its left operand for a truth value, which a mask cannot give (``__bool__`` must return
a bool). So a kernel function whose source holds ``and``, ``or`` or ``not`` is compiled
again from that source with each of them calling a helper:

* ``a and b and c`` -> ``__nki_and__(a, lambda: b, lambda: c)``: while the value so far is a
  mask, the next operand is evaluated and joined to it with ``&`` (another mask, or a
  Python bool: ``mask & True`` is the mask, ``mask & False`` selects nothing); otherwise
  exactly Python's rule (a false value is the result and the rest is not evaluated);
* ``a or b`` -> ``__nki_or__(a, lambda: b)``, ``not a`` -> ``__nki_not__(a)``: Python's
  rule; a mask there is one line (NKI joins masks with ``&`` only: nki.api.shared "NKI API
  Masking").

The new function has the original's globals (the module's own dict), closure cells,
defaults, name and file, and every node keeps its line, so an error still names FILE:LINE
of the kernel. Kept as they are (the original function runs): a function whose source
cannot be read, or whose source no longer compiles to the code it runs (a file edited since
it was imported, or test code pytest rewrote); an operand holding ``:=``, ``yield`` or
``await``, which a lambda would change; class bodies inside a kernel (a lambda there cannot
see the class's names). Only the kernel function (and the functions defined in it) is
compiled again: a helper it calls keeps Python's ``and`` (a mask there is the one-line
error of nki/index.py).
"""

from __future__ import annotations
import __future__

import ast
import inspect
import textwrap
import types
from collections.abc import Callable
from typing import Any

import numpy as np

from .index import Mask
from .record import fail

__all__ = ["and_", "not_", "or_", "with_masks"]

_AND, _OR, _NOT = "__nki_and__", "__nki_or__", "__nki_not__"
_OUTER = "__nki_masks_outer__"
_FUTURE = 0
for _name in __future__.all_feature_names:
    _FUTURE |= getattr(__future__, _name).compiler_flag


def and_(first: Any, *rest: Callable[[], Any]) -> Any:
    """``first and rest[0]() and ...``, masks joined with ``&``."""
    value = first
    for thunk in rest:
        if isinstance(value, Mask):
            other = thunk()
            if not isinstance(other, Mask | bool | np.bool_):
                raise fail(f"a mask joined with `and` to a {type(other).__name__}: a mask "
                           f"joins other masks (or True / False)")
            value = value & other
            continue
        if not value:
            return value
        value = thunk()
    return value


def or_(first: Any, *rest: Callable[[], Any]) -> Any:
    """``first or rest[0]() or ...`` (Python's rule); a mask joined so is one line."""
    value = first
    for thunk in rest:
        if isinstance(value, Mask):
            raise fail("masks joined with `or` are not modelled: NKI joins mask "
                       "comparisons with & (or `and`) only")
        if value:
            return value
        value = thunk()  # a mask here, with more to come, is refused at the loop's top
    return value


def not_(value: Any) -> bool:
    """``not value`` (Python's rule); a mask is one line."""
    if isinstance(value, Mask):
        raise fail("`not` of a mask is not modelled: write the opposite comparison "
                   "(i_p >= n for not i_p < n)")
    return not value


_HELPERS: dict[str, Callable[..., Any]] = {_AND: and_, _OR: or_, _NOT: not_}
# id(a function's code) -> (that code, kept alive so the id stays its own; the code compiled
# again, or the code itself: nothing to rewrite, or cannot be). Not keyed by the code: code
# objects compare equal across files (their filename is not compared)
_DONE: dict[int, tuple[types.CodeType, types.CodeType]] = {}


def with_masks(func: Any) -> Any:
    """``func`` compiled again with ``and`` / ``or`` / ``not`` calling the helpers above
    (the module docstring), or ``func`` itself when it has none or cannot be."""
    if not isinstance(func, types.FunctionType) or hasattr(func, "_nki_masks_from"):
        return func
    code = func.__code__
    got = _DONE.get(id(code))
    if got is None:
        got = _DONE[id(code)] = (code, _rewrite_code(func) or code)
    return func if got[1] is code else _bind(func, got[1])


def _bind(func: types.FunctionType, code: types.CodeType) -> Any:
    """A function of ``code`` with ``func``'s globals, closure cells and attributes."""
    cells = dict(zip(func.__code__.co_freevars, func.__closure__ or (), strict=True))
    closure = []
    for name in code.co_freevars:
        if name in _HELPERS:
            closure.append(types.CellType(_HELPERS[name]))
        elif name in cells:
            closure.append(cells[name])
        else:  # pragma: no cover - the wrapper binds only these names
            return func
    new = types.FunctionType(code, func.__globals__, func.__name__, func.__defaults__,
                             tuple(closure) or None)
    new.__kwdefaults__ = func.__kwdefaults__
    new.__dict__.update(func.__dict__)
    new.__qualname__, new.__module__ = func.__qualname__, func.__module__
    new.__doc__, new.__annotations__ = func.__doc__, func.__annotations__
    new._nki_masks_from = func  # type: ignore[attr-defined]
    return new


def _rewrite_code(func: types.FunctionType) -> types.CodeType | None:
    """The rewritten code, or None to keep ``func``."""
    code = func.__code__
    try:
        lines, first = inspect.getsourcelines(code)
    except (OSError, TypeError):
        return None
    indent = len(lines[0]) - len(lines[0].lstrip()) if lines else 0
    try:
        tree = ast.parse(textwrap.dedent("".join(lines)))
    except SyntaxError:
        return None
    if len(tree.body) != 1 or not isinstance(tree.body[0], ast.FunctionDef) or (
            tree.body[0].name != code.co_name):
        return None
    fdef = tree.body[0]
    if not any(isinstance(n, ast.BoolOp) or (isinstance(n, ast.UnaryOp) and isinstance(
            n.op, ast.Not)) for n in ast.walk(fdef)):
        return None
    for node in ast.walk(tree):
        for attr in ("col_offset", "end_col_offset"):
            if getattr(node, attr, None) is not None:
                setattr(node, attr, getattr(node, attr) + indent)
    ast.increment_lineno(tree, first - 1)
    flags = code.co_flags & _FUTURE
    try:
        # the source must be what runs (not a file edited since): compiled as it is, it
        # gives a code of the same names, constants and lines (not the same bytes: 3.11
        # loads a method of a name the module imports without LOAD_METHOD, and the import
        # is not in the function's source)
        same = _compile(fdef, code, flags)
        if same is None or _outline(same) != _outline(code):
            return None
        new_def = _Rewrite().visit(fdef)
        ast.fix_missing_locations(new_def)
        return _compile(new_def, code, flags)
    except (SyntaxError, ValueError, TypeError):
        return None


def _outline(c: types.CodeType) -> tuple[object, ...]:
    return (c.co_argcount, c.co_posonlyargcount, c.co_kwonlyargcount, c.co_varnames,
            c.co_names, c.co_freevars, c.co_firstlineno,
            sorted({line for _, _, line in c.co_lines() if line is not None}),
            [x for x in c.co_consts if not isinstance(x, types.CodeType)])


def _compile(fdef: ast.FunctionDef, code: types.CodeType, flags: int
             ) -> types.CodeType | None:
    """``fdef`` compiled inside a wrapper whose parameters are the original's free
    variables and the helpers, so those stay closure cells; its code object (the wrapper
    never runs, so neither do the decorators)."""
    params = [*code.co_freevars, *_HELPERS]
    outer = ast.FunctionDef(
        name=_OUTER,
        args=ast.arguments(posonlyargs=[], args=[ast.arg(arg=p) for p in params],
                           kwonlyargs=[], kw_defaults=[], defaults=[]),
        body=[fdef, ast.Return(value=ast.Name(id=fdef.name, ctx=ast.Load()))],
        decorator_list=[], returns=None, type_comment=None)
    ast.copy_location(outer, fdef)
    module = ast.Module(body=[outer], type_ignores=[])
    ast.fix_missing_locations(module)
    top = compile(module, code.co_filename, "exec", flags=flags, dont_inherit=True)
    for c in top.co_consts:
        if isinstance(c, types.CodeType) and c.co_name == _OUTER:
            for d in c.co_consts:
                if isinstance(d, types.CodeType) and d.co_name == fdef.name:
                    return d
    return None


_UNSAFE = (ast.NamedExpr, ast.Yield, ast.YieldFrom, ast.Await)


def _safe(node: ast.AST) -> bool:
    return not any(isinstance(n, _UNSAFE) for n in ast.walk(node))


def _thunk(node: ast.expr) -> ast.expr:
    lam = ast.Lambda(args=ast.arguments(posonlyargs=[], args=[], kwonlyargs=[],
                                        kw_defaults=[], defaults=[]), body=node)
    return ast.copy_location(lam, node)


class _Rewrite(ast.NodeTransformer):
    """``and`` / ``or`` / ``not`` -> the helpers (operands after the first as thunks)."""

    def visit_ClassDef(self, node: ast.ClassDef) -> ast.AST:
        return node  # a lambda in a class body cannot see the class's names

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        if not all(_safe(v) for v in node.values[1:]):
            return node
        helper = _AND if isinstance(node.op, ast.And) else _OR
        call = ast.Call(func=ast.Name(id=helper, ctx=ast.Load()),
                        args=[node.values[0], *map(_thunk, node.values[1:])], keywords=[])
        return ast.copy_location(call, node)

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if not isinstance(node.op, ast.Not):
            return node
        call = ast.Call(func=ast.Name(id=_NOT, ctx=ast.Load()), args=[node.operand],
                        keywords=[])
        return ast.copy_location(call, node)
