"""Which tasks' standard output reaches the terminal (``distrib launch --output-from``).

Every task of a synchronous job runs the same program on the same global
values, so its standard output mostly repeats the chief's: two workers of
``examples/tutorial_distributed_input.py`` print 407 interleaved lines, half
of them twice. By default the launcher therefore shows the **chief's**
standard output and **every task's standard error**: what the program
computes once, and whatever went wrong or warns anywhere (a traceback, a
warning, distrib's one-line errors). Other choices:

* ``all``: every task's standard output (torchrun's default);
* ``none``: no task's standard output (standard error still shows);
* a comma-separated list: ``0,1`` (workers 0 and 1), ``worker:1``, ``ps``
  (every ps task), ``evaluator``, ``chief``.

The *chief* is the ``chief`` task when the job has one, else worker 0 (the
glossary's chief); on a node of a multi-node job that runs neither, ``chief``
selects the node's first task, so every node's terminal shows one task.
Captured output (``output="capture"``) and ``--log-dir`` files keep every
task's output whatever the selection.

Example:
    >>> from distrib.launch.layout import ClusterLayout
    >>> tasks = ClusterLayout(workers=3, ps=1).tasks()
    >>> sorted(OutputSelection.parse("chief").task_names(tasks))
    ['worker 0']
    >>> sorted(OutputSelection.parse("1,ps").task_names(tasks))
    ['ps 0', 'worker 1']
    >>> OutputSelection.parse("wroker:1")
    Traceback (most recent call last):
    ...
    ValueError: --output-from: 'wroker:1' names no task: expected all, none, chief, N (worker N), TYPE or TYPE:N (TYPE: chief, worker, ps, evaluator)
"""
from __future__ import annotations

from dataclasses import dataclass
from typing import FrozenSet, Optional, Sequence, Tuple

from distrib.launch.layout import JOB_ORDER, TaskSpec

__all__ = ["OutputSelection", "DEFAULT_OUTPUT_FROM"]

DEFAULT_OUTPUT_FROM = "chief"
"""What ``distrib launch`` shows without ``--output-from``: the chief's standard output, every task's standard error."""

_EXPECTED = ("expected all, none, chief, N (worker N), TYPE or TYPE:N "
             f"(TYPE: {', '.join(JOB_ORDER)})")


@dataclass(frozen=True)
class OutputSelection:
    """A parsed ``--output-from``: ``everything``, or the chief role and explicit tasks.

    ``types`` holds whole jobs (``ps``); ``tasks`` holds ``(type, index)`` pairs.
    """

    text: str
    everything: bool = False
    chief_role: bool = False
    types: FrozenSet[str] = frozenset()
    tasks: FrozenSet[Tuple[str, int]] = frozenset()

    @classmethod
    def parse(cls, text: Optional[str]) -> "OutputSelection":
        """Parse ``all``, ``none``, ``chief`` or a comma-separated list; ``None`` is the default (``chief``).

        Raises:
            ValueError: an item names no task (the message names the item).
        """
        text = DEFAULT_OUTPUT_FROM if text is None else text
        items = [item.strip() for item in text.split(",")]
        if items == ["all"]:
            return cls(text, everything=True)
        if items == ["none"]:
            return cls(text)
        chief_role, types, tasks = False, set(), set()
        for item in items:
            kind, sep, index = item.partition(":")
            if item == "chief":
                chief_role = True
            elif item.isdigit():
                tasks.add(("worker", int(item)))
            elif not sep and kind in JOB_ORDER:
                types.add(kind)
            elif sep and kind in JOB_ORDER and index.isdigit():
                tasks.add((kind, int(index)))
            else:
                raise ValueError(f"--output-from: {item!r} names no task: {_EXPECTED}")
        return cls(text, chief_role=chief_role, types=frozenset(types), tasks=frozenset(tasks))

    def check(self, job: Sequence[TaskSpec]) -> None:
        """Refuse a task that the whole job (every node's tasks) does not have.

        Raises:
            ValueError: e.g. ``worker:5`` in a job of two workers.
        """
        known = {(t.task_type, t.task_index) for t in job}
        missing = sorted(self.tasks - known)
        if missing:
            kind, index = missing[0]
            have = sorted(i for t, i in known if t == kind)
            where = f"{kind} {have[0]}..{have[-1]}" if have else f"no {kind} task"
            raise ValueError(f"distrib launch: --output-from {self.text} names {kind} {index}, "
                             f"but this job has {where}")

    def task_names(self, local: Sequence[TaskSpec]) -> FrozenSet[str]:
        """The names of this launcher's tasks (``local``) whose standard output is shown."""
        if self.everything:
            return frozenset(t.name for t in local)
        shown = {t.name for t in local
                 if t.task_type in self.types or (t.task_type, t.task_index) in self.tasks}
        if self.chief_role and local:
            chief = next((t for t in local if t.task_type == "chief"), None)
            shown.add((chief or local[0]).name)
        return frozenset(shown)
