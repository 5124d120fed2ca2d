"""`DeviceStager`: start a batch's copy to the accelerator early; wait for it only when the step needs it.

On a CUDA device a host batch is copied from pinned (page-locked) memory,
non-blocking, on a side stream of its own; an event marks the end of the
copy. `finish` makes the compute stream wait for that event (the host does
not wait) and tells the caching allocator the tensors are now used on the
compute stream. Started a few batches ahead (`distrib.data.distribution.lookahead`), the
copies run while earlier steps compute, so the step never waits for input.

Tensors already on the device stay as they are (a dataset of device tensors
is gathered there, `distrib.data.blocks.TensorTable`). On the CPU, and for a
``None`` device, `start` and `finish` change nothing, so every CPU run takes
the same path, element for element.

Example:
    >>> stager = DeviceStager(torch.device("cuda:0"))
    >>> staged = stager.start((x_host, y_host))    # copies queued on the side stream
    >>> ...                                         # the current step runs
    >>> x, y = stager.finish(staged)                # the compute stream waits for them
"""
from __future__ import annotations

from typing import Any, Optional

import torch

from distrib.data.structure import leaves, map_leaves

__all__ = ["DeviceStager", "Staged", "staged_value"]


class Staged:
    """A batch whose copy to the device has started (``value`` holds the device tensors)."""

    __slots__ = ("value", "event")

    def __init__(self, value: Any, event: Any = None) -> None:
        self.value = value
        self.event = event


def staged_value(staged: Any) -> Any:
    """The (device) tensors of what `DeviceStager.start` returned, before `DeviceStager.finish`."""
    return staged.value if type(staged) is Staged else staged


class DeviceStager:
    """Copies batches to ``device`` (see the module docstring).

    Args:
        device: where batches go; None or a CPU device: nowhere (batches stay as they are).
    """

    def __init__(self, device: Optional[torch.device]) -> None:
        self.device = device if device is not None and device.type != "cpu" else None
        self._stream: Any = None

    def _move(self, t: Any) -> Any:
        if not isinstance(t, torch.Tensor) or t.device == self.device:
            return t
        if t.device.type == "cpu" and self.device.type == "cuda" and not t.is_pinned():  # type: ignore[union-attr]
            t = t.pin_memory()
        return t.to(self.device, non_blocking=True)

    def start(self, value: Any) -> Any:
        """Queue ``value``'s copy to the device (a `Staged`; with no device, ``value`` itself)."""
        device = self.device
        if device is None:
            return value
        if device.type != "cuda":
            return Staged(map_leaves(self._move, value))
        if self._stream is None:
            self._stream = torch.cuda.Stream(device)
        self._stream.wait_stream(torch.cuda.current_stream(device))  # device tensors produced before now
        with torch.cuda.stream(self._stream):
            moved = map_leaves(self._move, value)
        event = torch.cuda.Event()
        event.record(self._stream)
        return Staged(moved, event)

    def finish(self, staged: Any) -> Any:
        """The batch on the device, ready for the current stream (which waits; the host does not)."""
        if type(staged) is not Staged:
            return staged
        if staged.event is not None:
            current = torch.cuda.current_stream(self.device)
            current.wait_event(staged.event)
            for t in leaves(staged.value):
                if isinstance(t, torch.Tensor) and t.device.type == "cuda":
                    t.record_stream(current)
        return staged.value
