"""The safe state format: tensors in safetensors, everything else as a JSON skeleton.

A *state* is any nesting of dicts (keys: str, int, float, bool or None),
lists, tuples, tensors, numpy arrays and scalars, and the leaves int, float,
bool, str and None -- what ``module.state_dict()``, ``optimizer.state_dict()``
and the RNG getters return. `dumps_state` stores every tensor (and numpy
array) in a safetensors blob and describes the rest as a JSON *skeleton*
kept in the blob's metadata under ``distrib.skeleton``, so one file holds
the whole state and loading it runs no code: no pickle, ever.

The skeleton keeps what a plain ``json.dumps`` would lose, so the round trip
is exact: tuples stay tuples, int dict keys (optimizer ``state``) stay ints,
``OrderedDict`` and its ``_metadata`` (module versions) survive, and
non-finite floats are written as tagged strings.

Example:
    >>> opt = torch.optim.Adam(model.parameters())
    >>> save_state({"model": model.state_dict(), "opt": opt.state_dict()}, "memory://s.safetensors")
    >>> state = load_state("memory://s.safetensors")
    >>> sorted(state["opt"]["state"])          # int keys, as the optimizer wrote them
    [0, 1]

A file that is not safetensors -- such as one written by ``torch.save``,
which holds a pickle -- is refused with one line naming it.
"""
from __future__ import annotations

import collections
import json
from typing import Any, BinaryIO, Callable, Dict, Mapping, Optional

import numpy as np
import torch
from safetensors import SafetensorError
from safetensors.torch import load as _st_load
from safetensors.torch import save as _st_save

from distrib.checkpoint.errors import UnsafeFileError
from distrib.checkpoint.files.fs import url_to_fs
from distrib.checkpoint.files.safetensors_io import Header, check_leading_bytes, read_header, write_tensors
from distrib.checkpoint.files.skeleton import (SkeletonEncoder, check_array, check_key, check_tensor, decode_skeleton, short,
                                         state_dict_metadata, unsupported)
from distrib.utils.nest import is_namedtuple

__all__ = [
    "FORMAT_VERSION",
    "UnsafeFileError",
    "dumps_state",
    "loads_state",
    "freeze_state",
    "FrozenState",
    "decode_state",
    "copy_state",
    "encode_state",
    "save_state",
    "load_state",
    "read_tensors",
]

FORMAT_VERSION = "1"
_SKELETON_KEY = "distrib.skeleton"
_VERSION_KEY = "distrib.format"


# ----------------------------------------------------------------- bytes
def dumps_state(state: Any) -> bytes:
    """Serialise a nested state to the bytes of one safetensors file.

    Raises:
        TypeError: a leaf or key type is not supported; the message names its path.
    """
    tensors, meta = encode_state(state, copy_shared=True)
    try:
        return _st_save(tensors, metadata=meta)
    except (ValueError, KeyError, SafetensorError) as e:
        raise TypeError(f"cannot save state: safetensors refused it: {e}") from e


class FrozenState:
    """A copy of a state, taken now and serialised only if its bytes are asked for (``bytes(frozen)``).

    An elastic job keeps a snapshot of the training state every few steps
    and sends one only when a worker must be replaced: copying the tensors
    (a memory copy) costs a tenth of serialising them, and the bytes come out
    as `dumps_state` would have written them when the copy was taken.

    Example:
        >>> frozen = freeze_state({"w": w})     # w changes afterwards
        >>> loads_state(bytes(frozen))["w"]      # the value w had when frozen
    """

    __slots__ = ("_state", "_bytes", "nbytes")

    def __init__(self, state: Any) -> None:
        self._state = state
        self._bytes: Any = None
        #: The bytes its tensors and arrays hold (what keeping it costs in memory).
        self.nbytes = _nbytes(state)

    def __bytes__(self) -> bytes:
        if self._bytes is None:
            self._bytes, self._state = dumps_state(self._state), None
        return self._bytes


def freeze_state(state: Any) -> FrozenState:
    """A `FrozenState` of ``state``: tensors copied to the CPU, arrays and containers copied.

    Raises:
        TypeError: what `dumps_state` would refuse, named by its path, now rather than at serialisation.
    """
    return FrozenState(_copy(state, "state"))


def _nbytes(value: Any) -> int:
    if isinstance(value, torch.Tensor):
        return value.numel() * value.element_size()
    if isinstance(value, np.ndarray):
        return int(value.nbytes)
    if isinstance(value, dict):
        return sum(_nbytes(v) for v in value.values())
    if isinstance(value, (list, tuple)):
        return sum(_nbytes(v) for v in value)
    return 0


def copy_state(state: Any, reuse: Any = None) -> Any:
    """A copy of ``state`` nothing else holds: tensors copied to the CPU, arrays and containers copied.

    ``reuse``: an earlier copy of a state of the same layout; its tensors of
    the same shape and dtype are overwritten instead of allocated again (a
    background save copies into the previous save's copy: no page faults).

    Raises:
        TypeError: what `dumps_state` would refuse, named by its path.
    """
    return _copy(state, "state", reuse)


def _copy(value: Any, path: str, reuse: Any = None) -> Any:
    if isinstance(value, np.generic) or value is None or isinstance(value, (bool, int, str, float)):
        return value
    if isinstance(value, torch.Tensor):
        check_tensor(path, value)
        if (isinstance(reuse, torch.Tensor) and reuse.shape == value.shape and reuse.dtype == value.dtype
                and reuse.device.type == "cpu"):
            return reuse.copy_(value.detach())
        return value.detach().to("cpu", copy=True)
    if isinstance(value, np.ndarray):
        check_array(path, value)
        return value.copy()
    if isinstance(value, dict):
        out = collections.OrderedDict() if isinstance(value, collections.OrderedDict) else {}
        old = reuse if isinstance(reuse, dict) else {}
        for k, v in value.items():
            check_key(path, k)
            out[k] = _copy(v, f"{path}/{k}", old.get(k))
        meta = state_dict_metadata(value)
        if meta is not None:
            out._metadata = _copy(dict(meta), f"{path}/_metadata")  # type: ignore[union-attr]
        return out
    if isinstance(value, (list, tuple)) and not is_namedtuple(value):
        old_items = reuse if isinstance(reuse, (list, tuple)) and len(reuse) == len(value) else [None] * len(value)
        items = [_copy(v, f"{path}/{i}", old_items[i]) for i, v in enumerate(value)]
        return tuple(items) if isinstance(value, tuple) else items
    raise unsupported(path, value)


def loads_state(data: bytes, name: str = "<bytes>", device: Any = "cpu") -> Any:
    """Parse bytes written by `dumps_state`; ``name`` is used in error messages.

    A safetensors file without a distrib skeleton loads as a flat
    ``{tensor_name: tensor}`` dict.

    Raises:
        UnsafeFileError: the bytes are not a safetensors file (a pickle, a zip
            written by ``torch.save``, a truncated file, ...).
    """
    check_leading_bytes(bytes(data[:9]), len(data), name)
    try:
        tensors = _st_load(bytes(data))
    except (SafetensorError, ValueError, KeyError) as e:
        raise UnsafeFileError(f"{name}: not a valid safetensors state file ({e})") from e
    meta = _metadata(data)
    if device is not None and torch.device(device).type != "cpu":
        tensors = {k: v.to(device) for k, v in tensors.items()}
    return decode_state(meta, tensors, name)


def decode_state(metadata: Mapping[str, str], tensors: Mapping[str, Any], name: str) -> Any:
    """The state a file's metadata and tensors describe (``{name: tensor}`` for a file without a skeleton).

    ``tensors`` maps the file's tensor names to the values to place in the
    state: tensors, or any stand-in with a ``numpy()`` method (a reader that
    has not loaded the data yet uses references to plan where it goes).

    Raises:
        UnsafeFileError: an unsupported format version or a damaged or forged skeleton.
    """
    if _SKELETON_KEY not in metadata:
        return dict(tensors)
    if metadata.get(_VERSION_KEY) != FORMAT_VERSION:
        raise UnsafeFileError(f"{name}: state format version {metadata.get(_VERSION_KEY)!r} is not supported "
                              f"(expected {FORMAT_VERSION})")
    try:
        skeleton = json.loads(metadata[_SKELETON_KEY])
    except (ValueError, TypeError, RecursionError) as e:
        raise UnsafeFileError(f"{name}: damaged state skeleton ({type(e).__name__}: {short(e)})") from None
    return decode_skeleton(skeleton, tensors, name)


def encode_state(state: Any, copy_shared: bool = False) -> "tuple[Dict[str, torch.Tensor], Dict[str, str]]":
    """``(tensors by name, metadata)`` describing ``state``, for a file writer.

    The tensors are the state's own (detached, wherever they live): a
    streaming writer copies each to the CPU only when it writes it.
    ``copy_shared=True`` makes tensors that share memory separate copies (what
    ``safetensors.torch.save`` requires).

    Raises:
        TypeError: a leaf or key type is not supported; the message names its path.
    """
    enc = SkeletonEncoder(to_cpu=copy_shared)
    skeleton = enc.encode(state, "state")
    return enc.tensors, {_VERSION_KEY: FORMAT_VERSION, _SKELETON_KEY: json.dumps(skeleton, separators=(",", ":"))}


def _metadata(data: bytes) -> Dict[str, str]:
    n = int.from_bytes(data[:8], "little")
    header = json.loads(bytes(data[8 : 8 + n]))  # safetensors parsed this header already
    meta = header.get("__metadata__") if isinstance(header, dict) else None
    return dict(meta) if isinstance(meta, dict) else {}


# ----------------------------------------------------------------- files
def save_state(state: Any, path_or_url: str) -> None:
    """Write ``state`` to one safetensors file at a local path or fsspec URL, a tensor at a time.

    The state is never serialised whole in memory: each tensor goes from its
    own memory to the file (see `distrib.checkpoint.files.safetensors_io`). This
    writes in place; for crash safety write inside
    `distrib.checkpoint.files.storage.AtomicDirectory` instead.

    Raises:
        TypeError: a leaf, key or tensor type is not supported; the message names it.
    """
    tensors, metadata = encode_state(state)
    fs, path = url_to_fs(path_or_url)
    with fs.open(path, "wb") as handle:
        write_tensors(handle, tensors, metadata)


def read_tensors(handle: BinaryIO, header: Header, on_read: Optional[Callable[[Any], None]] = None,
                 device: Any = None) -> Dict[str, torch.Tensor]:
    """Every tensor ``header`` describes, read in file order from ``handle`` (positioned after the header).

    Each tensor is allocated at its own size and filled from the file, so the
    memory used is the state's, plus one tensor when ``device`` is not the CPU.
    """
    tensors: Dict[str, torch.Tensor] = {}
    move = device is not None and torch.device(device).type != "cpu"
    for entry in header.in_file_order():
        tensor = entry.empty()
        entry.read_into(handle, tensor, header.data_start, on_read, seek=False)
        tensors[entry.name] = tensor.to(device) if move else tensor
    return tensors


def load_state(path_or_url: str, device: Any = "cpu") -> Any:
    """Read a state written by `save_state`; tensors are placed on ``device``.

    The file is read a tensor at a time: no copy of the whole file is made.

    Raises:
        UnsafeFileError: the file is not a safetensors state file (e.g. a pickle).
        FileNotFoundError: nothing is at ``path_or_url``.
    """
    name = str(path_or_url)
    fs, path = url_to_fs(path_or_url)
    size = int(fs.size(path))
    with fs.open(path, "rb") as handle:
        header = read_header(handle, size, name)
        tensors = read_tensors(handle, header, device=device)
    return decode_state(header.metadata, tensors, name)
