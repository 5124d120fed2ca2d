"""Restore a state file into live objects: all or nothing, with memory bounded by one tensor.

Reading a state whole and then calling ``load_state_dict`` holds the model
twice (three times with the copy kept to undo a failed restore). Instead:

1. the file is checked (`StateFile.verify`: its sha256 through three 8 MiB buffers)
   and its skeleton decoded with references, not data (`StateFile.plan`);
2. every saved tensor that an object will copy in verbatim -- a module's
   parameters and buffers, an optimizer's state, a tracked tensor (see
   `verbatim_tensors`) -- of the same shape and dtype is *matched* with the
   live tensor it restores; the few others (counters, RNG states, anything
   that does not match) are read into new tensors, and what no tracked object
   takes is not read at all;
3. ``load_state_dict`` runs on every object with the matched live tensors in
   place of the saved ones: it checks everything (keys, shapes, optimizer
   groups, the objects' own rules) but changes no matched value. If anything
   fails, every object is put back from a copy of its *unmatched* state;
4. only then does `StateFile.stream_into` read the file front to back,
   straight into the matched tensors, and prove it did not change since 1.

So a restore's extra memory is a few read buffers plus the unmatched tensors.
The one failure left after step 3 is the file changing on disk between steps
1 and 4 (someone rewriting a committed checkpoint during the restore): it is
detected and reported as a `CorruptCheckpointError` saying
the objects hold part of it, and `Checkpoint.restore` goes on to an older checkpoint.

Example (a 3 GiB model restores with ~24 MiB extra, not 6 GiB):
    >>> with StateFile(path, "state.safetensors", manifest) as f:
    ...     result = restore_in_place(f, objects, apply, snapshot)
"""
from __future__ import annotations

import copy
from typing import Any, Callable, Dict, Iterable, List, Mapping, Tuple

import torch

from distrib.checkpoint.errors import CorruptCheckpointError
from distrib.checkpoint.files.format import decode_state
from distrib.checkpoint.files.state_file import StateFile, TensorRef
from distrib.checkpoint.trackable import RestoresVerbatim

__all__ = ["verbatim_tensors", "match_targets", "restore_in_place"]

_Key = Tuple[int, Tuple[int, ...], Tuple[int, ...], torch.dtype, str]


def _key(tensor: torch.Tensor) -> _Key:
    return (tensor.data_ptr(), tuple(tensor.shape), tuple(tensor.stride()), tensor.dtype, str(tensor.device))


def _copies_verbatim(module: torch.nn.Module) -> bool:
    """Whether ``module.load_state_dict`` copies saved values unchanged: no load hooks, torch's own loaders."""
    for sub in module.modules():
        if sub._load_state_dict_pre_hooks or sub._load_state_dict_post_hooks:  # torch's own hook tables (torch >= 1.13)
            return False
        loader = type(sub)._load_from_state_dict
        if not getattr(loader, "__module__", "").startswith("torch.nn."):
            return False
    return True


def verbatim_tensors(obj: Any) -> List[torch.Tensor]:
    """The live tensors whose values ``obj.load_state_dict`` (or ``copy_``) sets to the saved ones unchanged.

    Modules (without load hooks or their own ``_load_from_state_dict``),
    optimizers and tensors are known; any other object may say by defining
    ``tensors_restored_verbatim()`` (`distrib.Model` does). Everything else is
    restored from a new copy of the saved value, as ``load_state_dict`` may
    transform it.
    """
    if isinstance(obj, torch.Tensor):
        return [obj]
    if isinstance(obj, torch.nn.Module):
        if not _copies_verbatim(obj):
            return []
        return [t for t in obj.state_dict(keep_vars=True).values() if isinstance(t, torch.Tensor)]
    if isinstance(obj, torch.optim.Optimizer):
        return [v for per_param in obj.state.values() if isinstance(per_param, dict)
                for v in per_param.values() if isinstance(v, torch.Tensor)]
    if isinstance(obj, RestoresVerbatim) and callable(obj.tensors_restored_verbatim):
        return list(obj.tensors_restored_verbatim())
    return []


def match_targets(planned: Any, live: Any, verbatim: Iterable[torch.Tensor]) -> Dict[str, torch.Tensor]:
    """``{saved tensor name: live tensor}`` for every reference in ``planned`` that can be read in place.

    ``planned`` (from `StateFile.plan`) and ``live`` (the objects' ``state_dict()``)
    are walked together; a reference matches the live tensor at the same
    place when that tensor is one of ``verbatim`` and has the same shape and dtype.
    """
    keys = {_key(t.detach()) for t in verbatim}
    found: Dict[str, torch.Tensor] = {}

    def walk(saved: Any, current: Any) -> None:
        if isinstance(saved, TensorRef):
            if (not saved.as_numpy and isinstance(current, torch.Tensor) and current.dtype == saved.dtype
                    and tuple(current.shape) == saved.shape and _key(current.detach()) in keys):
                found[saved.name] = current.detach()
        elif isinstance(saved, Mapping) and isinstance(current, Mapping):
            for k, v in saved.items():
                if k in current:
                    walk(v, current[k])
        elif isinstance(saved, (list, tuple)) and isinstance(current, (list, tuple)):
            for s, c in zip(saved, current):
                walk(s, c)

    walk(planned, live)
    return found


def restore_in_place(state_file: StateFile, live: Dict[str, Any], verbatim: Callable[[], List[torch.Tensor]],
                     apply: Callable[[Any], Any]) -> Tuple[Any, Any]:
    """Run the restore the module docstring describes; returns ``(the saved state's plan, apply's result)``.

    Args:
        state_file: the checkpoint's state file, open.
        live: the objects' current ``state_dict()`` by name.
        verbatim: the tensors restored verbatim (`verbatim_tensors` of every object), asked
            before and after ``apply``.
        apply: restores a state into the objects, raising if it does not fit; called with the
            saved state (matched tensors replaced by the live ones), and with ``live``'s copy to undo.

    Raises:
        CorruptCheckpointError, UnsafeFileError: the file is damaged or forged (nothing changed).
        Whatever ``apply`` raises (every object is put back first).
    """
    state_file.verify()
    planned = state_file.plan()
    if not isinstance(planned, dict):
        return planned, None
    restored = {k: v for k, v in planned.items() if k in live}  # what no object takes is never read
    targets = match_targets(restored, live, verbatim())
    needed = {leaf.name for leaf in _leaves(restored) if isinstance(leaf, TensorRef)}
    others = state_file.read(sorted(needed - set(targets)))
    unread = {n: TensorRef(e) for n, e in state_file.header.entries.items() if n not in needed}
    state = _decode(state_file, {**unread, **others, **targets})
    target_keys = {_key(t) for t in targets.values()}
    undo = copy.deepcopy({k: v for k, v in live.items() if k in planned},  # the matched tensors are not copied
                         memo={id(t): t for t in _leaves(live)
                               if isinstance(t, torch.Tensor) and _key(t.detach()) in target_keys})
    try:
        result = apply(state)
    except BaseException:
        apply(undo)
        raise
    still = {_key(t.detach()) for t in verbatim()}
    moved = {n: state_file.header.entries[n].empty() for n, t in targets.items() if _key(t) not in still}
    try:
        state_file.stream_into({**targets, **moved})
    except CorruptCheckpointError as exc:
        raise CorruptCheckpointError(f"{exc}; it changed while it was restored, and the restored objects hold "
                                     f"part of it") from None
    if moved:  # an object let go of a matched tensor while applying: give it the values themselves
        result = apply(_decode(state_file, {**unread, **others, **targets, **moved}))
    return planned, result


def _decode(state_file: StateFile, tensors: Mapping[str, torch.Tensor]) -> Any:
    return decode_state(state_file.header.metadata, tensors, state_file.where)


def _leaves(value: Any) -> Iterable[Any]:
    if isinstance(value, Mapping):
        for v in value.values():
            yield from _leaves(v)
    elif isinstance(value, (list, tuple)):
        for v in value:
            yield from _leaves(v)
    else:
        yield value
