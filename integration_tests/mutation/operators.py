"""Mutation operators: small wrong versions of a module, made on its syntax tree.

Each :class:`Mutant` is one change at one place: an arithmetic or comparison operator
swapped for its neighbour, a number moved by one, a boolean flipped, a prim swapped for a
related one (``minimum`` for ``maximum``), a prim call dropped (``ctx.prim("minimum", v,
6.0)`` -> ``v``: hardsigmoid without its upper clamp), or, in the C++/Triton text of the
expression printers, one token of generated code swapped (``std::nearbyint`` ->
``std::round``, ``<`` -> ``<=``). Docstrings and error messages are never mutated: those
changes cannot make a number wrong.
"""

from __future__ import annotations

import ast
import copy
import re

import attrs

_BINARY_SWAPS: dict[type[ast.operator], type[ast.operator]] = {
    ast.Add: ast.Sub,
    ast.Sub: ast.Add,
    ast.Mult: ast.Div,
    ast.Div: ast.Mult,
    ast.FloorDiv: ast.Div,
    ast.Mod: ast.FloorDiv,
    ast.Pow: ast.Mult,
    ast.LShift: ast.RShift,
    ast.RShift: ast.LShift,
    ast.BitAnd: ast.BitOr,
    ast.BitOr: ast.BitAnd,
    ast.BitXor: ast.BitOr,
}
_COMPARE_SWAPS: dict[type[ast.cmpop], type[ast.cmpop]] = {
    ast.Lt: ast.LtE,
    ast.LtE: ast.Lt,
    ast.Gt: ast.GtE,
    ast.GtE: ast.Gt,
    ast.Eq: ast.NotEq,
    ast.NotEq: ast.Eq,
    ast.Is: ast.IsNot,
    ast.IsNot: ast.Is,
    ast.In: ast.NotIn,
    ast.NotIn: ast.In,
}
#: Prim names swapped for a related prim (a wrong but well-typed rule).
PRIM_SWAPS = {
    "add": "sub",
    "sub": "add",
    "mul": "div",
    "div": "mul",
    "maximum": "minimum",
    "minimum": "maximum",
    "lt": "le",
    "le": "lt",
    "gt": "ge",
    "ge": "gt",
    "eq": "ne",
    "ne": "eq",
    "exp": "expm1",
    "expm1": "exp",
    "log": "log1p",
    "log1p": "log",
    "sum": "amax",
    "amax": "amin",
    "amin": "amax",
    "floor": "ceil",
    "ceil": "floor",
    "round": "trunc",
    "trunc": "floor",
    "sqrt": "rsqrt",
    "rsqrt": "sqrt",
    "sin": "cos",
    "cos": "sin",
    "tanh": "sigmoid",
    "neg": "abs",
    "abs": "neg",
    "bitwise_and": "bitwise_or",
    "bitwise_or": "bitwise_and",
}
#: Token swaps inside generated C++/Triton text (each occurrence is one mutant).
CODE_SWAPS = (
    (r"nearbyint", "round"),
    (r"\brint\b", "round"),
    (r"\bfloor\b", "ceil"),
    (r"\bceil\b", "floor"),
    (r"\btrunc\b", "floor"),
    (r"_max\b", "_min"),
    (r"_min\b", "_max"),
    (r"\bmaximum\b", "minimum"),
    (r"\bminimum\b", "maximum"),
    (r"\bexp\b", "exp2"),
    (r"\blog\b", "log2"),
    (r"\bfmod\b", "remainder"),
    (r"\bf16\b", "bf16"),
    (r"\bbf16\b", "f16"),
    (r"(?<![<>=!&|])<(?![<=])", "<="),
    (r"(?<![<>=!&|])>(?![>=])", ">="),
    (r"<=", "<"),
    (r">=", ">"),
    (r"==", "!="),
    (r"!=", "=="),
    (r"(?<![+])\+(?![+=])", "-"),
    (r"(?<![-<>])-(?![->=\d])", "+"),
    (r"(?<![*/])\*(?![*=])", "/"),
    (r"(?<![/*])/(?![/*=])", "*"),
    (r"(?<![&])&(?![&=])", "|"),
    (r"(?<![|])\|(?![|=])", "&"),
    (r"\^", "|"),
    (r"(?<![.\w])(\d+)(?![.\w])", None),  # an integer literal, plus one
)
#: Calls never mutated (their arguments are messages or names, not arithmetic).
_SKIPPED_CALLS = frozenset({"NotDecomposable", "NotImplementedError", "ValueError", "TypeError"})


@attrs.frozen
class Mutant:
    """One change: the ``index``-th mutation site (in :func:`mutants`' order) of a file."""

    path: str
    index: int
    line: int
    description: str


class _Sites(ast.NodeTransformer):
    """Walks a tree numbering every mutation; with ``apply`` set, performs that one."""

    def __init__(self, code_strings: bool, apply: int | None = None) -> None:
        self.code_strings = code_strings
        self.apply = apply
        self.count = 0
        self.found: list[tuple[int, str]] = []

    def _site(self, node: ast.AST, description: str) -> bool:
        """Number a site; True when it is the one to apply."""
        index = self.count
        self.count += 1
        self.found.append((getattr(node, "lineno", 0), description))
        return index == self.apply

    def visit(self, node: ast.AST) -> ast.AST:
        if isinstance(node, ast.Expr) and isinstance(node.value, ast.Constant):
            return node  # a docstring
        if isinstance(node, ast.Raise | ast.Assert | ast.ImportFrom | ast.Import):
            return node
        if isinstance(node, ast.AnnAssign):  # the value only: attrs reads the annotation
            if node.value is not None:
                node.value = self.visit(node.value)
            return node
        if isinstance(node, ast.Call) and _call_name(node) in _SKIPPED_CALLS:
            return node
        return super().visit(node)

    def visit_FunctionDef(self, node: ast.FunctionDef) -> ast.AST:
        node.returns = None  # annotations hold no arithmetic
        return self.generic_visit(node)

    def visit_arg(self, node: ast.arg) -> ast.AST:
        return node

    def visit_BinOp(self, node: ast.BinOp) -> ast.AST:
        self.generic_visit(node)
        swap = _BINARY_SWAPS.get(type(node.op))
        description = f"{type(node.op).__name__} -> {swap.__name__}" if swap else ""
        if swap is not None and not _is_string_format(node) and self._site(node, description):
            node.op = swap()
        return node

    def visit_Compare(self, node: ast.Compare) -> ast.AST:
        self.generic_visit(node)
        for position, op in enumerate(node.ops):
            swap = _COMPARE_SWAPS.get(type(op))
            if swap is not None and self._site(node, f"{type(op).__name__} -> {swap.__name__}"):
                node.ops[position] = swap()
        return node

    def visit_BoolOp(self, node: ast.BoolOp) -> ast.AST:
        self.generic_visit(node)
        swap = ast.Or if isinstance(node.op, ast.And) else ast.And
        if self._site(node, f"{type(node.op).__name__} -> {swap.__name__}"):
            node.op = swap()
        return node

    def visit_UnaryOp(self, node: ast.UnaryOp) -> ast.AST:
        self.generic_visit(node)
        if isinstance(node.op, ast.Not | ast.USub) and self._site(
            node, f"drop {type(node.op).__name__}"
        ):
            return node.operand
        return node

    def visit_Call(self, node: ast.Call) -> ast.AST:
        self.generic_visit(node)
        operands = [a for a in node.args if not isinstance(a, ast.Constant | ast.Starred)]
        name = _call_name(node)
        if name == "prim" and node.args and isinstance(node.args[0], ast.Constant):
            prim_name = node.args[0].value
            swap = PRIM_SWAPS.get(prim_name) if isinstance(prim_name, str) else None
            if swap is not None and self._site(node, f"prim {prim_name} -> {swap}"):
                node.args[0] = ast.Constant(swap)
            if operands and self._site(node, f"drop prim {prim_name}"):
                return operands[0]
        elif name in ("cast", "where", "convert", "to_dtype") and operands:  # noqa: SIM102
            if self._site(node, f"drop {name}"):
                return operands[1] if name == "where" and len(operands) > 1 else operands[0]
        return node

    def visit_Constant(self, node: ast.Constant) -> ast.AST:
        value = node.value
        if isinstance(value, bool):
            if self._site(node, f"{value} -> {not value}"):
                return ast.Constant(not value)
        elif isinstance(value, int | float):
            changed = value + 1
            if self._site(node, f"{value!r} -> {changed!r}"):
                return ast.Constant(changed)
        elif isinstance(value, str) and self.code_strings:
            return self._code_string(node, value)
        return node

    def _code_string(self, node: ast.Constant, text: str) -> ast.AST:
        comments = _comment_spans(text)
        for pattern, replacement in CODE_SWAPS:
            for match in re.finditer(pattern, text):
                new = str(int(match.group(0)) + 1) if replacement is None else replacement
                start, end = match.span()
                # still numbered (the numbering stays that of earlier runs), never tested
                note = " " + IN_A_COMMENT if any(a <= start < b for a, b in comments) else ""
                if self._site(node, f"code {match.group(0)!r} -> {new!r}{note}"):
                    return ast.Constant(text[:start] + new + text[end:])
        return node


#: Marks a change inside a comment of generated code: equivalent, not tested or scored.
IN_A_COMMENT = "[in a comment]"


def _comment_spans(text: str) -> list[tuple[int, int]]:
    """Where ``//`` (C++) and ``#`` (Python) comments of generated code are in ``text``."""
    found = re.finditer(r"//[^\n]*|(?:^|(?<=\s))#[^\n]*", text, flags=re.MULTILINE)
    directives = ("#include", "#pragma")
    return [m.span() for m in found if not m.group(0).startswith(directives)]


def _call_name(node: ast.Call) -> str:
    func = node.func
    if isinstance(func, ast.Attribute):
        return func.attr
    if isinstance(func, ast.Name):
        return func.id
    return ""


def _is_string_format(node: ast.BinOp) -> bool:
    """``"..." % x`` or ``"a" + "b"``: text, not arithmetic."""
    return isinstance(node.left, ast.Constant) and isinstance(node.left.value, str)


def _code_strings(path: str) -> bool:
    """Printer modules spell generated code in their strings: mutate those too."""
    return "/inductor/" in path


def mutants(path: str, source: str) -> list[Mutant]:
    """Every mutant of ``source`` (the text of the module at ``path``), in a fixed order."""
    sites = _Sites(_code_strings(path))
    sites.visit(ast.parse(source, path))
    return [
        Mutant(path, index, line, description)
        for index, (line, description) in enumerate(sites.found)
    ]


def mutated_code(mutant: Mutant, source: str) -> ast.Module:
    """The tree of ``source`` with ``mutant`` applied."""
    tree = ast.parse(source, mutant.path)
    sites = _Sites(_code_strings(mutant.path), apply=mutant.index)
    tree = sites.visit(copy.deepcopy(tree))
    return ast.fix_missing_locations(tree)
