"""One way to pass the checkpoint role: no operation has a second entry that takes it (issue 51, item 2).

Each checkpoint operation is one method; the `CheckpointRole` a caller has
already resolved travels as its keyword-only ``role=`` (None: the operation
looks it up). Two rules over the classes of `distrib.checkpoint`:

* no twin: no method ``x_for`` beside ``x`` or ``_x``, no ``_x`` beside a public ``x``;
* a public method that takes a role takes it as the keyword-only ``role``
  (a ``strategy`` that may also be given as its role, as `PreemptionWatcher.agreed`
  takes, says where to look the role up: it stays the strategy's parameter).
"""
from __future__ import annotations

import ast
from pathlib import Path
from typing import Iterator, List, Tuple

PACKAGE = Path(__file__).resolve().parents[2] / "src" / "distrib" / "checkpoint"


def _classes(source: str) -> Iterator[ast.ClassDef]:
    for node in ast.walk(ast.parse(source)):
        if isinstance(node, ast.ClassDef):
            yield node


def _methods(node: ast.ClassDef) -> List[ast.FunctionDef]:
    return [f for f in node.body if isinstance(f, ast.FunctionDef) and not f.name.startswith("__")]


def twins(node: ast.ClassDef) -> List[Tuple[str, str]]:
    """Pairs (operation, its twin) among ``node``'s methods."""
    names = {f.name for f in _methods(node)}
    found = []
    for name in sorted(names):
        if name.endswith("_for"):
            found += [(other, name) for other in (name[:-4], name[:-4].lstrip("_"), "_" + name[:-4].lstrip("_"))
                      if other != name and other in names]
        if name.startswith("_") and name[1:] in names:
            found.append((name[1:], name))
    return sorted(set(found))


def role_taken_positionally(node: ast.ClassDef) -> List[str]:
    """Public methods of ``node`` taking a `CheckpointRole` other than as the keyword-only ``role``."""
    found = []
    for method in _methods(node):
        if method.name.startswith("_"):
            continue
        for arg in method.args.posonlyargs + method.args.args + method.args.kwonlyargs:
            annotation = ast.unparse(arg.annotation) if arg.annotation is not None else ""
            # ``strategy: Union[Strategy, CheckpointRole, None]`` names where the role comes from (as the seeds
            # pass a strategy), not the role an operation was handed: left to the strategy's parameter
            takes_role = arg.arg == "role" or ("CheckpointRole" in annotation and "Strategy" not in annotation)
            if takes_role and not (arg.arg == "role" and arg in method.args.kwonlyargs):
                found.append(f"{node.name}.{method.name}({arg.arg})")
    return found


def _package_classes() -> Iterator[Tuple[str, ast.ClassDef]]:
    for path in sorted(PACKAGE.rglob("*.py")):
        for node in _classes(path.read_text()):
            yield path.relative_to(PACKAGE.parents[1]).as_posix(), node


def test_no_checkpoint_operation_has_a_twin():
    found = [f"{where}: {node.name}.{a} / {node.name}.{b}" for where, node in _package_classes()
             for a, b in twins(node)]
    assert not found, ("a checkpoint operation with a second entry (pass the role as the keyword-only role= "
                       "of the one method instead):\n" + "\n".join(found))


def test_a_public_method_takes_the_role_only_as_the_keyword_role():
    found = [f"{where}: {entry}" for where, node in _package_classes() for entry in role_taken_positionally(node)]
    assert not found, "a role taken otherwise than as the keyword-only role=:\n" + "\n".join(found)


def test_the_rules_see_what_they_forbid():
    """The shapes the package had before (issue 51): a `_for(role)` twin, a private twin, a positional role."""
    old = ast.parse(
        "class Checkpoint:\n"
        "    def write(self, path): ...\n"
        "    def write_for(self, role, path): ...\n"
        "    def read(self, path): ...\n"
        "    def _read(self, role: Optional[CheckpointRole], path): ...\n"
        "    def state_dict(self): ...\n"
        "    def state_dict_for(self, role: CheckpointRole): ...\n").body[0]
    assert isinstance(old, ast.ClassDef)
    assert twins(old) == [("read", "_read"), ("state_dict", "state_dict_for"), ("write", "write_for")]
    assert role_taken_positionally(old) == ["Checkpoint.write_for(role)", "Checkpoint.state_dict_for(role)"]
    new = ast.parse(
        "class Checkpoint:\n"
        "    def write(self, path, *, role: Optional[CheckpointRole] = None): ...\n"
        "    def _published(self, role: CheckpointRole, path): ...\n"
        "    def agreed(self, strategy: Union[Strategy, CheckpointRole, None] = None): ...\n").body[0]
    assert isinstance(new, ast.ClassDef)
    assert twins(new) == [] and role_taken_positionally(new) == []
