"""Restore a state file into live objects: all or nothing, with memory bounded by one tensor.

Reading a state whole and then calling ``load_state_dict`` holds the model
twice (three times with the copy kept to undo a failed restore). Instead:

1. its header and skeleton are decoded with references, not data (`StateFile.plan`),
   and every tensor's *declared* dtype and shape is checked against the live tensor it
   restores (`check_declared`: a 6 GiB claim or a relabelled dtype is refused before a
   byte of it is hashed or allocated); then the file is checked (`StateFile.verify`:
   its sha256 through three 8 MiB buffers);
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

from distrib.checkpoint.errors import CheckpointRestoreError, CorruptCheckpointError, UnsafeFileError
from distrib.checkpoint.files.format import decode_state
from distrib.checkpoint.files.state_file import StateFile, TensorRef
from distrib.checkpoint.trackable import RestoresVerbatim

__all__ = ["verbatim_tensors", "match_targets", "check_declared", "restore_in_place", "EXACT_CASTS",
           "NEW_TENSOR_BUDGET"]

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


#: Saved dtype -> live dtypes it restores into by an exact cast (every value representable). Any other
#: disagreement skips the checkpoint: a restore never reinterprets or rounds a saved value.
EXACT_CASTS: Dict[torch.dtype, Tuple[torch.dtype, ...]] = {
    torch.float16: (torch.float32, torch.float64), torch.bfloat16: (torch.float32, torch.float64),
    torch.float32: (torch.float64,), torch.int8: (torch.int16, torch.int32, torch.int64, torch.float32, torch.float64),
    torch.uint8: (torch.int16, torch.int32, torch.int64, torch.float32, torch.float64),
    torch.int16: (torch.int32, torch.int64, torch.float32, torch.float64), torch.int32: (torch.int64, torch.float64),
}
#: The saved tensors read into new memory (those no live tensor takes in place) may hold at most this many
#: times the bytes of the tracked objects' own tensors (an Adam state is twice its parameters), or 256 MiB.
NEW_TENSOR_BUDGET = (4, 256 * 2 ** 20)


def _fits(saved: torch.dtype, live: torch.dtype) -> bool:
    return saved == live or live in EXACT_CASTS.get(saved, ())


def _nbytes(tensor: torch.Tensor) -> int:
    return tensor.numel() * tensor.element_size()


def check_declared(planned: Any, live: Any, verbatim: Iterable[torch.Tensor], where: str) -> None:
    """Refuse a state whose tensors, as its header declares them, do not fit the live ones; reads no data.

    Walks ``planned`` (`StateFile.plan`'s references) beside ``live``: a saved
    tensor restored verbatim (a parameter, buffer, optimizer state, tracked
    tensor or `Variable`) must declare the live tensor's shape, and every saved
    tensor with a live tensor at its place its dtype or one that casts to it
    exactly (`EXACT_CASTS`). The tensors no live tensor takes in place, read
    into new memory, must stay within `NEW_TENSOR_BUDGET`.

    Raises:
        CheckpointRestoreError: naming the tensor, what the file declares and what the object holds.

    Example (a weight whose header claims 6 GiB; nothing is allocated):
        >>> check_declared(plan, {"model": model.state_dict()}, verbatim_tensors(model), "/ckpts/ckpt-2")
        CheckpointRestoreError: /ckpts/ckpt-2: tensor 'state/model/0.weight' is declared (40000, 40000) float32 (6.0 GiB); the tracked 'model/0.weight' is (4, 3) float32
    """
    keys = {_key(t.detach()) for t in verbatim if not _lazy(t)}
    seen: Dict[int, int] = {}
    fresh: List[TensorRef] = []

    def refuse(saved: TensorRef, path: str, current: torch.Tensor) -> CheckpointRestoreError:
        return CheckpointRestoreError(
            f"{where}: tensor {saved.name[:120]!r} is declared {tuple(saved.shape)} {_dt(saved.dtype)} "
            f"({_size(saved.entry.nbytes)}); the tracked {path[:120]!r} is {tuple(current.shape)} "
            f"{_dt(current.dtype)}")

    def walk(saved: Any, current: Any, path: str) -> None:
        if isinstance(current, torch.Tensor) and not _lazy(current):
            seen.setdefault(current.data_ptr() or id(current), _nbytes(current))
        if isinstance(saved, TensorRef):
            if not isinstance(current, torch.Tensor) or _lazy(current) or saved.as_numpy:
                fresh.append(saved)
                return
            in_place = _key(current.detach()) in keys
            if not _fits(saved.dtype, current.dtype) or (in_place and tuple(current.shape) != saved.shape):
                raise refuse(saved, path, current)
            if not (in_place and saved.dtype == current.dtype):
                fresh.append(saved)
        elif isinstance(saved, Mapping):
            for k, v in saved.items():
                walk(v, current.get(k) if isinstance(current, Mapping) else None, f"{path}/{k}")
        elif isinstance(saved, (list, tuple)):
            items = list(current) if isinstance(current, (list, tuple)) else []
            for i, s in enumerate(saved):
                walk(s, items[i] if i < len(items) else None, f"{path}/{i}")

    for name, value in planned.items():
        walk(value, live.get(name), name)
    for t in verbatim:
        if not _lazy(t):
            seen.setdefault(t.data_ptr() or id(t), _nbytes(t))
    need = sum(ref.entry.nbytes for ref in {ref.name: ref for ref in fresh}.values())
    factor, floor = NEW_TENSOR_BUDGET
    allowed = max(factor * sum(seen.values()), floor)
    if need > allowed:
        largest = max(fresh, key=lambda ref: ref.entry.nbytes)
        raise CheckpointRestoreError(
            f"{where}: its tensors that no tracked tensor takes in place need {_size(need)} "
            f"(the largest, {largest.name[:120]!r}, is declared {tuple(largest.shape)} {_dt(largest.dtype)}), "
            f"more than {factor}x the tracked objects' {_size(sum(seen.values()))}")


def _lazy(tensor: torch.Tensor) -> bool:
    return isinstance(tensor, torch.nn.parameter.UninitializedTensorMixin)


def _dt(dtype: torch.dtype) -> str:
    return str(dtype).replace("torch.", "")


def _size(n: int) -> str:
    for unit, scale in (("GiB", 2 ** 30), ("MiB", 2 ** 20), ("KiB", 2 ** 10)):
        if n >= scale:
            return f"{n / scale:.1f} {unit}"
    return f"{n} bytes"


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
        CheckpointRestoreError: a tensor's declared dtype or shape does not fit (`check_declared`;
            nothing read, nothing changed).
        Whatever ``apply`` raises (every object is put back first).
    """
    try:
        planned = state_file.plan()
    except UnsafeFileError:
        state_file.verify()  # damage is named as damage, not as a malformed file
        raise
    if not isinstance(planned, dict):
        state_file.verify()
        return planned, None
    restored = {k: v for k, v in planned.items() if k in live}  # what no object takes is never read
    check_declared(restored, live, verbatim(), state_file.where)
    state_file.verify()
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
