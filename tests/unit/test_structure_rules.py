"""Rules for concepts, beside the size cap (`test_module_size`) and the layers (`test_layering`).

* No mixin reads its host's private names: a class that reads ``self._x``
  defines ``_x`` itself (assigns it, or declares it as a class attribute) or
  inherits it from a distrib base class; a part that needs its host's state
  takes it in its constructor, or types the host by a ``Protocol`` of public
  names (as `distrib.comm.elastic.membership.MembershipHost` does). Classes
  with a base outside distrib are left out (that base may define the name).
* Module heads (the module docstring) are at most 20 lines; the rationale
  goes to docs/. The modules over that today are counted, and the count may
  only shrink (`MAX_LONG_HEADS`): shorten a head when you touch its module.
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Dict, Iterator, List, Set, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "distrib"
HEAD_LINES = 20
#: Modules whose head was over HEAD_LINES when this rule was written (issue 51): may only shrink.
MAX_LONG_HEADS = 130
_NEUTRAL_BASES = {"object", "ABC", "Protocol", "Generic", "Enum", "NamedTuple"}


def _trees() -> Iterator[Tuple[Path, ast.Module]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        yield path, ast.parse(path.read_text())


def _base_names(node: ast.ClassDef) -> List[str]:
    names = []
    for base in node.bases:
        if isinstance(base, ast.Subscript):
            base = base.value
        names.append(base.id if isinstance(base, ast.Name) else base.attr if isinstance(base, ast.Attribute) else "?")
    return names


def _defined_and_read(node: ast.ClassDef) -> Tuple[Set[str], Set[str]]:
    """The names a class defines (methods, class attributes, ``self.x = ``) and the private ones it reads."""
    defined: Set[str] = set()
    read: Set[str] = set()
    for item in node.body:
        if isinstance(item, (ast.FunctionDef, ast.AsyncFunctionDef)):
            defined.add(item.name)
        elif isinstance(item, ast.Assign):
            defined.update(t.id for t in item.targets if isinstance(t, ast.Name))
        elif isinstance(item, ast.AnnAssign) and isinstance(item.target, ast.Name):
            defined.add(item.target.id)
    for sub in ast.walk(node):
        if isinstance(sub, ast.Attribute) and isinstance(sub.value, ast.Name) and sub.value.id in ("self", "cls"):
            if isinstance(sub.ctx, ast.Store):
                defined.add(sub.attr)
            elif sub.attr.startswith("_") and not sub.attr.startswith("__"):
                read.add(sub.attr)
        elif isinstance(sub, ast.Call) and len(sub.args) > 1 and isinstance(sub.args[1], ast.Constant):
            func = sub.func  # setattr(self, "_x", v) / object.__setattr__(self, "_x", v)
            if (isinstance(func, ast.Name) and func.id == "setattr") or \
                    (isinstance(func, ast.Attribute) and func.attr == "__setattr__"):
                defined.add(str(sub.args[1].value))
    return defined, read


def test_no_mixin_reads_its_host_s_private_names():
    classes: Dict[str, List[Tuple[Path, ast.ClassDef]]] = {}
    for path, tree in _trees():
        for node in ast.walk(tree):
            if isinstance(node, ast.ClassDef):
                classes.setdefault(node.name, []).append((path, node))

    def inherited(name: str, seen: Set[str]) -> Tuple[Set[str], bool]:
        """Names ``name`` and its distrib bases define; True if a base is not distrib's."""
        if name in _NEUTRAL_BASES or name in seen:
            return set(), False
        if name not in classes:
            return set(), True
        seen.add(name)
        names: Set[str] = set()
        outside = False
        for _, node in classes[name]:
            names |= _defined_and_read(node)[0]
            for base in _base_names(node):
                more, out = inherited(base, seen)
                names |= more
                outside |= out
        return names, outside

    readers = []
    for name, nodes in classes.items():
        for path, node in nodes:
            if "Protocol" in _base_names(node):
                continue
            defined, outside = inherited(name, set())
            if outside:
                continue
            missing = sorted(_defined_and_read(node)[1] - defined)
            if missing:
                readers.append(f"{path.relative_to(PACKAGE.parent).as_posix()}: {name} reads {missing}")
    assert not readers, ("classes reading private names they neither define nor inherit (a mixin reading its "
                         "host's): give the part an explicit constructor, or type its host by a Protocol:\n"
                         + "\n".join(readers))


def _head_lines(tree: ast.Module) -> int:
    first = tree.body[0] if tree.body else None
    if isinstance(first, ast.Expr) and isinstance(first.value, ast.Constant) and isinstance(first.value.value, str):
        return first.end_lineno - first.lineno + 1  # type: ignore[operator]
    return 0


def test_module_heads_over_twenty_lines_only_become_fewer():
    long_heads = [f"{path.relative_to(PACKAGE.parent).as_posix()} ({n})" for path, tree in _trees()
                  if (n := _head_lines(tree)) > HEAD_LINES]
    assert len(long_heads) <= MAX_LONG_HEADS, (
        f"{len(long_heads)} module heads over {HEAD_LINES} lines, at most {MAX_LONG_HEADS}: move the rationale "
        "to docs/ and keep the head to what the module is and one example:\n" + "\n".join(long_heads))


def test_the_rules_see_what_they_forbid():
    mixin = ast.parse("class Part:\n    def f(self):\n        return self._host_thing\n")
    node = mixin.body[0]
    assert isinstance(node, ast.ClassDef)
    defined, read = _defined_and_read(node)
    assert read - defined == {"_host_thing"}
    declared = ast.parse("class Part:\n    _host_thing: int = 0\n    def f(self):\n        return self._host_thing\n")
    node = declared.body[0]
    assert isinstance(node, ast.ClassDef)
    defined, read = _defined_and_read(node)
    assert not read - defined
    assert _head_lines(ast.parse('"""' + "\n" * 21 + '"""\nx = 1\n')) == 22
