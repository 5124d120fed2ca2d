"""`HostReads`: find the places that read a tensor's value on the host, on any device.

On a GPU, reading a device value on the host (``.item()``, ``float(t)``,
``bool(t)``, ``if t:``, ``.tolist()``, ``.cpu()``, ``.numpy()``,
``.to("cpu")``) waits for every kernel queued before it: inside a training
step each such read stalls the pipeline. On a CPU they cost nothing, which
is why they creep in unseen. `HostReads` records every such call made while
it is active, wherever the tensors live — so a test on a CPU-only machine
fails on the read a GPU would pay for — together with the line of code that
made it (the innermost frame outside torch).

Example:
    >>> with HostReads() as reads:
    ...     loss = model(x).sum()
    ...     if loss > 0:                  # bool(tensor): a host read
    ...         pass
    >>> reads.count, reads.sites()
    (1, ['train.py:12 (__bool__)'])

``t.to(device)`` counts when ``device`` is the CPU: on a CPU-only test that is
also every ``.to(x.device)`` of a host constant, which on a GPU is a copy from
host memory at every step (blocking, from pageable memory): worth finding too.

`torch.cuda.set_sync_debug_mode("error")` is the GPU-only counterpart
(it sees the synchronisations themselves, not the calls that cause them).
"""
from __future__ import annotations

import os
import sys
from typing import Any, Callable, Dict, List, Optional, Tuple

import torch
from torch.overrides import TorchFunctionMode

__all__ = ["HostReads", "HOST_READ_NAMES"]

#: Tensor methods that hand a device value to the host.
HOST_READ_NAMES = frozenset({"item", "tolist", "numpy", "cpu", "__bool__", "__float__", "__int__", "__index__",
                             "__complex__", "__format__", "__array__"})

_TORCH_DIR = os.path.dirname(torch.__file__)


def _is_host_copy(name: str, args: Tuple[Any, ...], kwargs: Dict[str, Any]) -> bool:
    """``t.to("cpu")`` / ``t.to(torch.device("cpu"))`` / ``t.to(device="cpu")``: a copy to the host."""
    if name != "to":
        return False
    target = kwargs.get("device", args[1] if len(args) > 1 else None)
    if isinstance(target, (str, torch.device)):
        try:
            return torch.device(target).type == "cpu"
        except RuntimeError:
            return False
    return False


class HostReads(TorchFunctionMode):
    """A context manager recording each host read of a tensor made inside it (see the module docstring).

    Args:
        ignore: predicates ``(name, site) -> bool``; a read they accept is not recorded
            (e.g. reads a test knows it makes itself).
    """

    def __init__(self, ignore: Optional[List[Callable[[str, str], bool]]] = None) -> None:
        super().__init__()
        self.records: List[Tuple[str, str]] = []
        self._ignore = list(ignore or [])

    def __torch_function__(self, func: Any, types: Any, args: Tuple[Any, ...] = (),
                           kwargs: Optional[Dict[str, Any]] = None) -> Any:
        kwargs = kwargs or {}
        name = getattr(func, "__name__", "")
        if name in HOST_READ_NAMES or _is_host_copy(name, args, kwargs):
            site = _caller_site()
            if not any(ignore(name, site) for ignore in self._ignore):
                self.records.append((name, site))
        return func(*args, **kwargs)

    @property
    def count(self) -> int:
        """How many host reads were recorded."""
        return len(self.records)

    def sites(self) -> List[str]:
        """``"file:line (method)"`` of each recorded read, in order."""
        return [f"{site} ({name})" for name, site in self.records]


def _caller_site() -> str:
    """The innermost frame outside torch and this module, as ``path:line``."""
    frame = sys._getframe(2)
    while frame is not None:
        path = frame.f_code.co_filename
        if not path.startswith(_TORCH_DIR) and path != __file__:
            return f"{os.path.relpath(path) if not path.startswith('<') else path}:{frame.f_lineno}"
        frame = frame.f_back
    return "?"
