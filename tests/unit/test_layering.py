"""The package's layering: no import cycles, and lower layers never import higher ones.

Layers, bottom up (a module may import from its own layer and those below):

* ``distrib.errors``, ``distrib.process`` (start processes, ports, exit codes),
  ``distrib.utils``;
* ``distrib.error_report``, ``distrib.hooks`` (the one place process-wide
  hooks are installed), ``distrib.cluster``, ``distrib.comm``;
* ``distrib.io`` (tf.io's counterparts: TFRecord files, Example protos, image
  files), which imports only the bottom layer; ``STRING``, the string dtype,
  lives in ``distrib.io.dtypes`` so that Example parsing names it without
  importing the pipelines;
* ``distrib.data`` (input pipelines: never the strategies that use them; its
  file readers use ``distrib.io``), itself in wings, bottom up: core < sources,
  readers < caching < transforms < parallel < distribution < the face;
* everything else (strategies, training, checkpoint, ...);
* ``distrib.launch`` (the launcher), imported only by ``distrib.__main__``
  and ``distrib.testing`` (whose harness runs clusters through it);
* ``distrib.testing`` (test doubles and harness), imported by no package module.

The rules are read from the source (every import, top-level or inside a
function or ``if TYPE_CHECKING:``), so a lazy import that breaks a rule is
caught too. No module imports itself through others (a circle is printed
``a -> b -> a``); process-wide hooks, calls and decorators alike, go through
``distrib.hooks``; a ``strategy`` parameter names its type, not ``Any``.
"""
from __future__ import annotations

import ast
import functools
import json
import pathlib
import subprocess
import sys
import textwrap
from typing import Dict, Iterator, List, Set, Tuple

import pytest

import distrib

SRC = pathlib.Path(distrib.__file__).resolve().parent
BOTTOM = {"distrib.errors", "distrib.process", "distrib.utils"}
LOW = BOTTOM | {"distrib.error_report", "distrib.hooks", "distrib.cluster", "distrib.comm"}
ABOVE_DATA = {"distrib.strategies", "distrib.training", "distrib.callbacks", "distrib.checkpoint",
              "distrib.metrics", "distrib.losses", "distrib.optimizers", "distrib.mixed_precision",
              "distrib.launch", "distrib.testing"}


def _module_name(path: pathlib.Path) -> str:
    parts = list(path.relative_to(SRC.parent).with_suffix("").parts)
    return ".".join(parts[:-1] if parts[-1] == "__init__" else parts)


@functools.lru_cache(maxsize=None)
def _modules() -> Dict[str, pathlib.Path]:
    return {_module_name(p): p for p in sorted(SRC.rglob("*.py"))}


def _imported_module(target: str) -> str:
    """The distrib module an import of ``target`` runs: ``target`` itself or, for a name, the module defining it."""
    while target not in _modules() and "." in target:
        target = target.rpartition(".")[0]
    return target


def _imports(name: str, path: pathlib.Path) -> Iterator[str]:
    """Every distrib module ``name`` imports, anywhere in the file (inside functions and
    ``if TYPE_CHECKING:`` too): relative imports resolved, ``from distrib.a import b`` ->
    ``distrib.a.b`` when that is a module, else ``distrib.a``."""
    package = name if path.name == "__init__.py" else name.rpartition(".")[0]
    for node in ast.walk(ast.parse(path.read_text(), str(path))):
        if isinstance(node, ast.Import):
            yield from (_imported_module(a.name) for a in node.names if a.name.split(".")[0] == "distrib")
        elif isinstance(node, ast.ImportFrom):
            target = node.module or ""
            if node.level:
                base = package.split(".")[:len(package.split(".")) - node.level + 1]
                target = ".".join(base + ([node.module] if node.module else []))
            if target == "distrib" or target.startswith("distrib."):
                yield from sorted({_imported_module(f"{target}.{a.name}") for a in node.names})


def _part_of(module: str, groups: Set[str]) -> bool:
    return any(module == g or module.startswith(g + ".") for g in groups)


@functools.lru_cache(maxsize=None)
def _edges() -> List[Tuple[str, str]]:
    return [(name, target) for name, path in _modules().items() for target in _imports(name, path)]


def test_the_rules_see_the_imports_they_check():
    edges = _edges()
    assert ("distrib.launch.supervisor", "distrib.process.spawn") in edges
    assert ("distrib.strategies.local_replicas.connect", "distrib.process.spawn") in edges


def test_nothing_outside_the_launcher_imports_it_but_the_cli_entry_and_the_test_harness():
    allowed = {"distrib.launch", "distrib.testing", "distrib.__main__"}
    bad = [f"{a} imports {b}" for a, b in _edges() if _part_of(b, {"distrib.launch"}) and not _part_of(a, allowed)]
    assert not bad, "; ".join(bad)


def test_low_layers_import_nothing_above_them():
    bad = [f"{a} imports {b}" for a, b in _edges()
           if _part_of(a, LOW) and b.startswith("distrib.") and not _part_of(b, LOW)]
    bad += [f"{a} imports {b}" for a, b in _edges()
            if _part_of(a, BOTTOM) and not _part_of(b, BOTTOM)]
    assert not bad, "; ".join(bad)


def test_input_pipelines_import_no_strategy_training_launcher_or_test_code():
    bad = [f"{a} imports {b}" for a, b in _edges() if _part_of(a, {"distrib.data"}) and _part_of(b, ABOVE_DATA)]
    assert not bad, "; ".join(bad)


# distrib.data's wings, bottom up: a data module imports only from its own wing and those below.
_DATA_CORE = {f"distrib.data.{m}" for m in ("dataset", "stream", "blocks", "structure", "strings", "ragged",
                                               "options", "iterator", "operator_table", "dataset_ops",
                                               "generators", "batch_split", "batch_buffers", "seed_mixing")}
_DATA_WINGS = [_DATA_CORE,
               {"distrib.data.sources", "distrib.data.readers"},
               {"distrib.data.caching"},
               {"distrib.data.transforms"},
               {"distrib.data.parallel"},
               {"distrib.data.distribution"},
               {"distrib.data", "distrib.data.catalog", "distrib.data.experimental", "distrib.data.dataset_creator"}]


def _data_wing(module: str) -> int:
    """The level of a distrib.data module (the most specific wing that holds it wins)."""
    return max((level for level, wing in enumerate(_DATA_WINGS) for w in wing
                if module == w or (w != "distrib.data" and module.startswith(w + "."))),
               default=len(_DATA_WINGS) - 1)


def test_the_data_wing_rule_places_modules_where_the_list_says():
    assert _data_wing("distrib.data.dataset") == 0
    assert _data_wing("distrib.data.readers.text") == _data_wing("distrib.data.sources.in_memory") == 1
    assert _data_wing("distrib.data.transforms.elementwise") < _data_wing("distrib.data.parallel.parallel_map")
    assert _data_wing("distrib.data") == _data_wing("distrib.data.catalog") == len(_DATA_WINGS) - 1
    assert ("distrib.data.parallel.prefetch", "distrib.data.transforms.elementwise") in _edges()
    # Dataset's lazy import (inside a method) is seen: it is why generators.py stays in the core.
    assert ("distrib.data.dataset", "distrib.data.generators") in _edges()
    # loader_workers (parallel/) splits batches: why batch_split.py stays in the core.
    assert ("distrib.data.parallel.loader_workers", "distrib.data.batch_split") in _edges()


def test_data_wings_import_only_their_own_wing_and_those_below():
    """core < sources, readers < caching < transforms < parallel < distribution < the face (see docs/layout.md)."""
    modules = [m for m in _modules() if _part_of(m, {"distrib.data"})]
    for m in modules:  # every module sits in a listed wing: a new top-level module must be placed
        assert m == "distrib.data" or any(m == w or m.startswith(w + ".") for wing in _DATA_WINGS for w in wing), m
    bad = [f"{a} imports {b}" for a, b in _edges()
           if _part_of(a, {"distrib.data"}) and _part_of(b, {"distrib.data"}) and _data_wing(b) > _data_wing(a)]
    assert not bad, "; ".join(bad)

def test_io_imports_only_the_bottom_layer():
    bad = [f"{a} imports {b}" for a, b in _edges()
           if _part_of(a, {"distrib.io"}) and b.startswith("distrib.") and not _part_of(b, BOTTOM | {"distrib.io"})]
    assert not bad, "; ".join(bad)
    assert ("distrib.data.readers.tfrecord", "distrib.io.records") in _edges()
    assert ("distrib.data.strings", "distrib.io.dtypes") in _edges()


def test_no_package_module_imports_the_test_doubles():
    bad = [f"{a} imports {b}" for a, b in _edges()
           if _part_of(b, {"distrib.testing"}) and not _part_of(a, {"distrib.testing"})]
    assert not bad, "; ".join(bad)


_GLOBAL_HOOK_CALLS = {("signal", "signal"), ("atexit", "register"), ("faulthandler", "enable"),
                      ("faulthandler", "register")}
_GLOBAL_HOOK_ATTRS = {("sys", "excepthook"), ("threading", "excepthook"), ("sys", "unraisablehook")}


def _names_hook_installer(node: ast.AST) -> bool:
    """``atexit.register`` (and the like) as an expression: what a decorator or a call names."""
    return (isinstance(node, ast.Attribute) and isinstance(node.value, ast.Name)
            and (node.value.id, node.attr) in _GLOBAL_HOOK_CALLS)


def _installs_global_hook(node: ast.AST) -> bool:
    if isinstance(node, (ast.FunctionDef, ast.AsyncFunctionDef, ast.ClassDef)):
        return any(_names_hook_installer(d) for d in node.decorator_list)  # @atexit.register
    if isinstance(node, ast.ImportFrom):  # from atexit import register: a call that hides its module
        return any((node.module, a.name) in _GLOBAL_HOOK_CALLS for a in node.names)
    if isinstance(node, ast.Call):
        func = node.func
        name = func.attr if isinstance(func, ast.Attribute) else getattr(func, "id", "")
        if name == "register_optimizer_step_pre_hook" or name.startswith("register_module_"):
            return True
        return _names_hook_installer(func)
    if isinstance(node, ast.Assign):
        return any(isinstance(t, ast.Attribute) and isinstance(t.value, ast.Name)
                   and (t.value.id, t.attr) in _GLOBAL_HOOK_ATTRS for t in node.targets)
    return False


def _hook_lines(source: str) -> List[int]:
    return sorted(node.lineno for node in ast.walk(ast.parse(textwrap.dedent(source)))
                  if _installs_global_hook(node))


def test_the_hooks_rule_sees_calls_decorators_assignments_and_imported_installers():
    assert _hook_lines("""
        import atexit, signal, sys
        from atexit import register
        atexit.register(print)
        @atexit.register
        def bye():
            pass
        sys.excepthook = print
        signal.signal(2, print)
    """) == [3, 4, 6, 8, 9]  # a decorated function is named by its def line
    assert _hook_lines("""
        import functools
        from signal import SIGTERM
        @functools.lru_cache
        def f():
            return SIGTERM
    """) == []


def test_process_wide_hooks_are_installed_only_by_distrib_hooks():
    bad = []
    for name, path in _modules().items():
        # The fork server is the whole program of its own process: it sets its own signal handlers,
        # gives each forked task Python's defaults back and reports an uncaught exception as Python does.
        if name in ("distrib.hooks", "distrib.process.fork_server"):
            continue
        for node in ast.walk(ast.parse(path.read_text(), str(path))):
            if _installs_global_hook(node):
                bad.append(f"{path.relative_to(SRC.parent)}:{node.lineno}")
    assert not bad, "install process-wide hooks through distrib.hooks: " + ", ".join(bad)


_ISOLATED_IMPORTS = textwrap.dedent("""
    import importlib, json, sys
    import torch  # loaded once; every distrib module is imported afresh below
    failures = {}
    for name in json.loads(sys.argv[1]):
        for loaded in [m for m in sys.modules if m == "distrib" or m.startswith("distrib.")]:
            del sys.modules[loaded]
        try:
            importlib.import_module(name)
        except Exception as exc:
            failures[name] = f"{type(exc).__name__}: {exc}"
    print(json.dumps(failures))
""")


def _import_each_alone(names: List[str]) -> Dict[str, str]:
    proc = subprocess.run([sys.executable, "-c", _ISOLATED_IMPORTS, json.dumps(names)],
                          capture_output=True, text=True, timeout=600, cwd=SRC.parent)
    assert proc.returncode == 0, proc.stderr[-3000:]
    return json.loads(proc.stdout.strip().splitlines()[-1])


def test_every_subpackage_and_top_level_module_imports_first_on_its_own():
    """Imported first in a fresh distrib, each must load: an import cycle would fail one of them."""
    names = sorted(n for n in _modules() if n.count(".") == 1 and not n.endswith("__main__"))
    names.append("distrib.strategies.parameter_server")
    assert not _import_each_alone(names)


@pytest.mark.slow
def test_every_module_imports_first_on_its_own():
    names = sorted(n for n in _modules() if not n.endswith("__main__"))
    assert not _import_each_alone(names)


def _package(module: str) -> str:
    return ".".join(module.split(".")[:2])


def test_no_import_cycle_between_packages():
    """Package A imports B and B imports A (lazily or not, typing-only included): none."""
    graph: Dict[str, Set[str]] = {}
    for source, target in _edges():
        a, b = _package(source), _package(target)
        if a != b:
            graph.setdefault(a, set()).add(b)

    def reaches(start: str, goal: str) -> bool:
        seen, todo = set(), [start]
        while todo:
            node = todo.pop()
            if node == goal:
                return True
            if node not in seen:
                seen.add(node)
                todo.extend(graph.get(node, ()))
        return False

    cycles = sorted((a, b) for a, targets in graph.items() for b in targets if reaches(b, a))
    assert not cycles, f"packages importing each other (directly or through others): {cycles}"


# Module import edges that still close a circle, in files another engineer owns this wave (the
# training loop and the parameter server). The lead empties this list at merge; an entry whose
# import is gone fails the test, so it only shrinks.
_CIRCLE_EDGES_LEFT: Set[Tuple[str, str]] = set()


def _module_graph() -> Dict[str, Set[str]]:
    graph: Dict[str, Set[str]] = {}
    for source, target in _edges():
        if source != target and (source, target) not in _CIRCLE_EDGES_LEFT:
            graph.setdefault(source, set()).add(target)
    return graph


def _a_cycle(graph: Dict[str, Set[str]]) -> List[str]:
    """One import circle of ``graph`` as ``[a, b, ..., a]``, or ``[]`` when it has none."""
    done: Set[str] = set()
    for root in sorted(graph):
        path: List[str] = []
        on_path: Set[str] = set()
        todo = [(root, iter(sorted(graph.get(root, ()))))]
        path.append(root)
        on_path.add(root)
        while todo:
            node, targets = todo[-1]
            target = next(targets, None)
            if target is None:
                todo.pop()
                path.pop()
                on_path.discard(node)
                done.add(node)
            elif target in on_path:
                return path[path.index(target):] + [target]
            elif target not in done:
                todo.append((target, iter(sorted(graph.get(target, ())))))
                path.append(target)
                on_path.add(target)
    return []


def test_the_circle_finder_finds_a_circle_and_names_it():
    assert _a_cycle({"a": {"b"}, "b": {"c"}, "c": {"a"}, "d": {"a"}}) == ["a", "b", "c", "a"]
    assert _a_cycle({"a": {"b", "c"}, "b": {"c"}, "c": set()}) == []


def test_the_module_graph_sees_lazy_and_typing_only_imports():
    edges = set(_edges())
    assert ("distrib.strategies.base", "distrib.comm.grad_sync") in edges  # inside a method
    assert ("distrib.strategies.replication", "distrib.comm.options") in edges  # if TYPE_CHECKING:


def test_no_module_import_circle_lazy_and_typing_only_imports_included():
    """No module imports itself through others, counting every import anywhere in the file."""
    cycle = _a_cycle(_module_graph())
    assert not cycle, "modules importing each other: " + " -> ".join(cycle)


def test_the_circle_allow_list_names_only_imports_that_still_exist():
    stale = sorted(_CIRCLE_EDGES_LEFT - set(_edges()))
    assert not stale, f"these imports are gone: remove them from _CIRCLE_EDGES_LEFT: {stale}"


# ``strategy: Any`` still in files another engineer (loop) owns this wave (the lead empties this at merge).
_UNTYPED_STRATEGY_LEFT: Set[str] = set()


def _untyped_strategies(tree: ast.AST) -> List[int]:
    """Lines where a parameter named ``strategy`` is annotated ``Any``."""
    lines = []
    for node in ast.walk(tree):
        if isinstance(node, ast.arg) and node.arg == "strategy" and node.annotation is not None:
            note = node.annotation
            if (isinstance(note, ast.Name) and note.id == "Any") or (isinstance(note, ast.Constant)
                                                                   and note.value == "Any"):
                lines.append(node.lineno)
    return lines


def test_strategy_parameters_name_the_strategy_type_not_any():
    assert _untyped_strategies(ast.parse("def f(strategy: Any, g: Any): ...\ndef h(strategy: 'Strategy'): ...")) == [1]
    bad = []
    for path in _modules().values():
        where = path.relative_to(SRC.parent).as_posix()
        if where not in _UNTYPED_STRATEGY_LEFT:
            bad += [f"{where}:{line}" for line in _untyped_strategies(ast.parse(path.read_text(), str(path)))]
    assert not bad, "annotate with distrib.strategies.interface.Strategy: " + ", ".join(bad)
