"""torch's ``SerializedArtifact`` for `distrib.saved_model.load`, on every torch distrib supports.

distrib writes an exported program's weights itself (safetensors) and hands
them to torch's deserialiser as tensors. Recent torch releases take them as
dicts and have a fourth field (``example_inputs``); older ones (torch 2.3)
have three fields and read the weights only from ``torch.save`` bytes, which
they unpickle. There the bytes are made here, in this process, from the
tensors the verified safetensors file held: nothing read from the export is
ever unpickled.

Example:
    >>> import torch
    >>> artifact = serialized_artifact(b"{}", {"w": torch.zeros(2)}, {})
    >>> type(artifact).__name__
    'SerializedArtifact'
"""
from __future__ import annotations

import dataclasses
import io
from typing import Any, Dict

import torch

__all__ = ["serialized_artifact"]


def serialized_artifact(program_json: bytes, state_dict: Dict[str, torch.Tensor],
                        constants: Dict[str, torch.Tensor]) -> Any:
    """The ``SerializedArtifact`` this torch's ``deserialize`` expects, for a program and its tensors."""
    from torch._export.serde.serialize import SerializedArtifact

    fields = [f.name for f in dataclasses.fields(SerializedArtifact)]
    if "example_inputs" in fields:
        return SerializedArtifact(program_json, state_dict, constants, b"")
    return SerializedArtifact(program_json, _tensor_bytes(state_dict), _tensor_bytes(constants))


def _tensor_bytes(tensors: Dict[str, torch.Tensor]) -> bytes:
    """``torch.save`` of a dict of tensors built in this process (what torch 2.3's deserialiser reads)."""
    if not tensors:
        return b""
    buffer = io.BytesIO()
    torch.save(tensors, buffer)
    return buffer.getvalue()
