"""Check an exported program's JSON before torch deserialises it: the file is untrusted input.

torch's own loader (``torch.export.load``) falls back to unpickling, resolves
any ``torch.<attr>`` path named in the graph as an operator, parses symbolic
shape expressions with ``sympy.sympify`` (``eval``) and compiles the saved
guard code. distrib's loader therefore hands torch only a program that
passed these checks, and the tensors from safetensors:

* every node's operator is a registered ATen/prims operator
  (``torch.ops.aten.<op>.<overload>``) or one of a few ``_operator``
  functions on sizes; anything else (``torch.os.system``, higher-order
  operators, custom classes) is refused;
* names are plain identifiers;
* symbolic expressions use only symbol names, numbers, arithmetic and
  sympy's constructor names;
* node metadata (stack traces, module paths) and guard code are dropped:
  `distrib.saved_model` checks input shapes and dtypes itself against the
  recorded signature.

Example:
    >>> program = json.loads(program_bytes)
    >>> sanitized_program(program, "/models/m/program.json")   # raises UnsafeProgramError if not acceptable
"""
from __future__ import annotations

import re
from typing import Any, Dict

from distrib.errors import DistribError

__all__ = ["UnsafeProgramError", "sanitized_program"]

_ATEN = re.compile(r"^torch\.ops\.(aten|prims)\.[A-Za-z_][A-Za-z0-9_]*(\.[A-Za-z_][A-Za-z0-9_]*)?$")
_OPERATOR = {f"_operator.{name}" for name in ("getitem", "add", "sub", "mul", "floordiv", "truediv", "mod",
                                              "neg", "eq", "ne", "lt", "le", "gt", "ge", "and_", "or_", "not_")}
_IDENTIFIER = re.compile(r"^[A-Za-z_][A-Za-z0-9_]*$")
_EXPR_TOKEN = re.compile(r"\s*(?:'(?P<quoted>[A-Za-z_][A-Za-z0-9_]*)'|(?P<name>[A-Za-z_][A-Za-z0-9_]*)"
                         r"|(?P<number>\d+(?:\.\d+)?(?:e[+-]?\d+)?)|(?P<op>[-+*/%(),=<>!&|~]))")
_SYMBOL = re.compile(r"^[a-z]{1,4}\d+$")
_EXPR_NAMES = {
    "Symbol", "Integer", "Rational", "Float", "Add", "Mul", "Pow", "Max", "Min", "Abs", "Eq", "Ne", "Lt", "Le",
    "Gt", "Ge", "StrictLessThan", "StrictGreaterThan", "LessThan", "GreaterThan", "Equality", "Unequality", "And",
    "Or", "Not", "true", "false", "True", "False", "oo", "zoo", "positive", "negative", "integer", "nonnegative",
    "real", "finite", "FloorDiv", "ModularIndexing", "Where", "PythonMod", "Mod", "CleanDiv", "CeilToInt",
    "FloorToInt", "TruncToInt", "RoundToInt", "RoundDecimal", "IntTrueDiv", "FloatTrueDiv", "ToFloat", "Identity",
    "IsNonOverlappingAndDenseIndicator", "PowByNatural", "FloatPow", "LShift", "RShift", "BitwiseFn_bitwise_and",
    "BitwiseFn_bitwise_or", "OpaqueUnaryFn_sqrt",
}
_MAX_EXPR = 4096


class UnsafeProgramError(DistribError, ValueError):
    """An exported program uses something distrib does not load from a file (it may not be ours)."""


def _check_expr(expr: Any, where: str) -> None:
    if not isinstance(expr, str) or len(expr) > _MAX_EXPR:
        raise UnsafeProgramError(f"{where}: symbolic expression is not a string of at most {_MAX_EXPR} characters")
    pos = 0
    while pos < len(expr):
        m = _EXPR_TOKEN.match(expr, pos)
        if m is None or m.end() == pos:
            if expr[pos:].strip() == "":
                return
            raise UnsafeProgramError(f"{where}: refusing symbolic expression {expr[:80]!r} (unexpected "
                                     f"{expr[pos:pos + 10]!r}); was this program written by distrib.saved_model?")
        name = m.group("name")
        if name is not None and name not in _EXPR_NAMES and not _SYMBOL.match(name):
            raise UnsafeProgramError(f"{where}: refusing symbolic expression {expr[:80]!r} (name {name!r})")
        if m.group("quoted") is not None and not _SYMBOL.match(m.group("quoted")):
            raise UnsafeProgramError(f"{where}: refusing symbol name {m.group('quoted')!r}")
        pos = m.end()


def _check_target(target: Any, where: str) -> None:
    if not isinstance(target, str) or not (_ATEN.match(target) or target in _OPERATOR):
        raise UnsafeProgramError(
            f"{where}: refusing operator {str(target)[:80]!r}: distrib loads only programs made of ATen operators "
            "(torch.ops.aten.*); re-export the model, or use torch.export.load on files you trust")


def _walk(node: Any, where: str, depth: int) -> Any:
    if depth > 200:
        raise UnsafeProgramError(f"{where}: program nested too deeply")
    if isinstance(node, list):
        return [_walk(v, where, depth + 1) for v in node]
    if not isinstance(node, dict):
        return node
    out: Dict[str, Any] = {}
    for key, value in node.items():
        if key == "metadata":
            out[key] = {}
            continue
        if key in ("class_fqn", "custom_obj", "as_custom_obj", "extension_operator"):
            raise UnsafeProgramError(f"{where}: refusing a program with custom objects ({key}); re-export "
                                     "a model made of tensor operations only")
        if key == "target":
            _check_target(value, where)
        elif key == "expr_str":
            _check_expr(value, where)
        elif key == "name" and isinstance(value, str) and not _IDENTIFIER.match(value):
            raise UnsafeProgramError(f"{where}: refusing name {value[:80]!r} (not an identifier)")
        out[key] = _walk(value, where, depth + 1)
    return out


def sanitized_program(program: Any, where: str) -> Dict[str, Any]:
    """A copy of the program's JSON that passed the checks (metadata and guard code removed).

    Raises:
        UnsafeProgramError: naming ``where`` and what was refused.
    """
    if not isinstance(program, dict) or not isinstance(program.get("graph_module"), dict):
        raise UnsafeProgramError(f"{where}: not an exported program (no graph_module)")
    clean = _walk(program, where, 0)
    if "guards_code" in clean:  # torch before 2.6 (?) has no guard code in its schema
        clean["guards_code"] = []
    for symbol in (clean.get("range_constraints") or {}):
        if not isinstance(symbol, str) or not _SYMBOL.match(symbol):
            raise UnsafeProgramError(f"{where}: refusing range constraint on {str(symbol)[:40]!r}")
    return clean
