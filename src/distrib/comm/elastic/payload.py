"""The catch-up payload: an `OpLog`'s entries (and a snapshot and start-up log) as bytes, and back.

What a survivor sends a replacement or a lagging replica: a JSON header plus
the raw bytes of each logged tensor and of the snapshot, so nothing in it is
ever unpickled; `decode_payload` checks every count and byte range and
raises `ReplayMismatchError` naming what is malformed.
"""
from __future__ import annotations

import json
from typing import Any, Dict, List

import torch

from distrib.comm.elastic.oplog import Entry, OpLog, ReplayMismatchError

__all__ = ["encode_payload", "decode_payload"]


_MAGIC = b"distrib-elastic-1\n"
_DTYPES = {str(d): d for d in (torch.float16, torch.bfloat16, torch.float32, torch.float64, torch.uint8,
                               torch.int8, torch.int16, torch.int32, torch.int64, torch.bool)}


class _Writer:
    def __init__(self) -> None:
        self.parts: List[bytes] = []
        self.size = 0

    def add(self, data: bytes) -> List[int]:
        self.parts.append(data)
        self.size += len(data)
        return [self.size - len(data), len(data)]

    def entries(self, entries: List[Entry]) -> List[Dict[str, Any]]:
        out = []
        for e in entries:
            tensors = []
            for t in e.outputs:
                t = t.detach().cpu().contiguous()
                span = self.add(t.reshape(-1).view(torch.uint8).numpy().tobytes() if t.numel() else b"")
                tensors.append({"dtype": str(t.dtype), "shape": list(t.shape), "span": span})
            out.append({"seq": e.seq, "kind": e.kind, "outputs": tensors})
        return out


def encode_payload(log: OpLog, until: int, since: int, replace: bool) -> bytes:
    """What the leader sends: entries from ``since`` to ``until`` and, for a replacement, snapshot and startup.

    The format is a JSON header plus raw tensor bytes: nothing in it is ever unpickled.
    """
    writer = _Writer()
    header: Dict[str, Any] = {"until": until, "error": None, "mark": None, "snap_seq": None, "snapshot": None,
                              "startup": []}
    if replace:
        snap = log.catch_up_snapshot(until)
        if snap is None or log.first_mark is None:
            header["error"] = ("no in-memory snapshot to start a replacement from (elastic recovery needs a "
                               "BackupAndRestore or CheckpointManager.save() before the failure)")
        else:
            since = min(since, snap.seq)
            header.update(mark=snap.mark, snap_seq=snap.seq, snapshot=writer.add(bytes(snap.data)),
                          startup=writer.entries(log.startup), extras=writer.entries([Entry(0, "extras", snap.extras)]))
    entries = log.entries_between(since, until)
    if any(e.spoilt for e in entries) and header["error"] is None:
        header.update(error=("the program changed reduced gradients in place (zero_grad(set_to_none=False) or "
                             "accumulating into them) since the newest in-memory snapshot, so its steps cannot be "
                             "replayed (from the next snapshot on they can)"), mark=None, snap_seq=None, snapshot=None,
                      startup=[])
        entries = []
    header["entries"] = writer.entries(entries)
    head = json.dumps(header).encode()
    return _MAGIC + len(head).to_bytes(8, "big") + head + b"".join(writer.parts)


def decode_payload(data: bytes) -> Dict[str, Any]:
    """The leader's payload, checked: a malformed one raises `ReplayMismatchError` naming what is wrong."""
    try:
        if not data.startswith(_MAGIC):
            raise ValueError("it does not start with distrib's marker")
        at = len(_MAGIC)
        size = int.from_bytes(data[at:at + 8], "big")
        if size > len(data) - at - 8:
            raise ValueError("its header claims more bytes than were sent")
        header = json.loads(data[at + 8:at + 8 + size].decode())
        blob = memoryview(data)[at + 8 + size:]
        if not isinstance(header, dict):
            raise ValueError("its header is not an object")
        snapshot = header.get("snapshot")
        return {"until": _int(header.get("until")), "error": header.get("error"),
                "mark": None if header.get("mark") is None else _int(header["mark"]),
                "snap_seq": None if header.get("snap_seq") is None else _int(header["snap_seq"]),
                "snapshot": b"" if snapshot is None else bytes(_span(blob, snapshot)),
                "startup": _read_entries(header.get("startup"), blob),
                "entries": _read_entries(header.get("entries"), blob),
                "extras": [t for e in _read_entries(header.get("extras", []), blob) for t in e.outputs]}
    except (ValueError, TypeError, KeyError, UnicodeDecodeError) as exc:
        raise ReplayMismatchError(f"elastic recovery payload is malformed: {exc}") from None


def _int(value: Any) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < 0:
        raise ValueError(f"{value!r} is not a count")
    return value


def _span(blob: memoryview, span: Any) -> memoryview:
    if not isinstance(span, list) or len(span) != 2:
        raise ValueError("a byte range is not [offset, length]")
    start, length = _int(span[0]), _int(span[1])
    if start + length > len(blob):
        raise ValueError("a byte range lies outside the payload")
    return blob[start:start + length]


def _read_entries(items: Any, blob: memoryview) -> List[Entry]:
    if not isinstance(items, list):
        raise ValueError("its entries are not a list")
    entries = []
    for item in items:
        outputs = []
        for t in item["outputs"]:
            dtype = _DTYPES[t["dtype"]]
            shape = [_int(n) for n in t["shape"]]
            raw = _span(blob, t["span"])
            count = 1
            for n in shape:
                count *= n
            if len(raw) != count * torch.empty(0, dtype=dtype).element_size():
                raise ValueError(f"a {t['dtype']} tensor of shape {shape} does not hold {len(raw)} bytes")
            flat = torch.frombuffer(bytearray(raw), dtype=dtype) if count else torch.empty(0, dtype=dtype)
            outputs.append(flat.reshape(shape))
        entries.append(Entry(_int(item["seq"]), str(item["kind"]), outputs))
    return entries
