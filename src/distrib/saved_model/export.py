"""``distrib.saved_model``: export a model for inference and load it without the training code.

The role of TF's SavedModel (``tf.saved_model.save`` / ``tf.saved_model.load``),
built on ``torch.export``. `save` traces the module's forward pass (in eval
mode) for inputs matching the *input signature* and writes a verified
directory, committed atomically by the chief::

    my_export/
      program.json          the traced graph (torch.export's JSON schema: ATen operators only)
      weights.safetensors   parameters, buffers and tensor constants
      signature.json        the serving signature: input shapes (None = any size) and dtypes
      MANIFEST.json, COMPLETE

`load` returns a `LoadedModel`: call it, or use TF's idiom
``loaded.signatures["serving_default"](x)``, which returns a dict
``{"output_0": tensor}``. Loading needs torch and distrib only: not the
module's class, not the training script.

The input signature comes from ``input_signature`` (a list of
`distrib.TensorSpec`, ``None`` for dimensions of any size, e.g. the batch),
or from ``example_inputs`` (a batch: its first dimension becomes any-size).

Trust: loading never unpickles. ``torch.export.load`` may fall back to
pickle, so it is not used; the weights come from safetensors and the graph
is checked first (`distrib.saved_model.program_check`: ATen operators only,
no custom objects, no code), then rebuilt with torch's JSON deserialiser.

Example:
    >>> distrib.saved_model.save(model, "/tmp/export",
    ...     input_signature=[distrib.TensorSpec(shape=(None, 1, 28, 28), dtype=torch.float32)])
    >>> loaded = distrib.saved_model.load("/tmp/export")
    >>> infer = loaded.signatures["serving_default"]
    >>> infer(images)["output_0"].shape            # any batch size
    torch.Size([7, 10])
"""
from __future__ import annotations

import json
from typing import Any, Dict, List, Optional, Protocol, Sequence, Tuple, Union, runtime_checkable

import numpy as np
import torch

from distrib.checkpoint.files import storage
from distrib.data.structure import TensorSpec
from distrib.errors import DistribError, first_line
from distrib.saved_model.options import check_load_options, check_save_options
from distrib.saved_model.program_check import UnsafeProgramError, sanitized_program
from distrib.checkpoint.chief_directory import NestedState, write_directory

__all__ = ["save", "load", "LoadedModel", "ExportError", "DEFAULT_SERVING_SIGNATURE_DEF_KEY"]


DEFAULT_SERVING_SIGNATURE_DEF_KEY = "serving_default"
"""The name of the one serving signature `save` writes and a loaded model's ``signatures`` holds
(TensorFlow's name: ``loaded.signatures["serving_default"]``)."""
FORMAT = "distrib.saved_model"
FORMAT_VERSION = 1
PROGRAM_NAME = "program.json"
WEIGHTS_NAME = "weights.safetensors"
SIGNATURE_NAME = "signature.json"


class ExportError(DistribError, ValueError):
    """The model cannot be exported (torch.export cannot trace it, or the signature is unusable)."""


@runtime_checkable
class _TrainedModel(Protocol):
    """A `distrib.Model` as export sees it (the training package is above this one)."""

    module: torch.nn.Module
    distribute_strategy: Any


def _module_and_strategy(obj: Any) -> Tuple[torch.nn.Module, Any]:
    from distrib.strategies import default

    if isinstance(obj, _TrainedModel) and isinstance(obj.module, torch.nn.Module):
        return obj.module, obj.distribute_strategy
    module = getattr(obj, "module", obj)  # a torch wrapper (DataParallel, DDP): what it wraps is exported
    if not isinstance(module, torch.nn.Module):
        raise ExportError(f"saved_model.save needs a distrib.Model or torch.nn.Module, got {type(obj).__name__}")
    return module, default.get_strategy()


def _specs(input_signature: Any, example_inputs: Any, where: str) -> List[TensorSpec]:
    if input_signature is not None:
        items = list(input_signature) if isinstance(input_signature, (list, tuple)) else [input_signature]
        specs = []
        for i, spec in enumerate(items):
            if not isinstance(spec, TensorSpec):
                raise ExportError(f"{where}: input_signature[{i}] must be a distrib.TensorSpec, got "
                                  f"{type(spec).__name__}")
            dtype = spec.dtype if isinstance(spec.dtype, torch.dtype) else _dtype(str(spec.dtype), where)
            specs.append(TensorSpec(tuple(None if d is None else int(d) for d in spec.shape), dtype))
        return specs
    if example_inputs is not None:
        items = list(example_inputs) if isinstance(example_inputs, (list, tuple)) else [example_inputs]
        tensors = [torch.as_tensor(x) for x in items]
        return [TensorSpec((None, *t.shape[1:]) if t.dim() else (), t.dtype) for t in tensors]
    raise ExportError(f"{where}: give the input signature: input_signature=[distrib.TensorSpec(shape=(None, ...), "
                      "dtype=torch.float32)] or example_inputs=<a batch>")


def _dtype(name: str, where: str) -> torch.dtype:
    dtype = getattr(torch, name.replace("torch.", ""), None)
    if not isinstance(dtype, torch.dtype):
        raise ExportError(f"{where}: unknown dtype {name!r}")
    return dtype


def _example(spec: TensorSpec, device: torch.device) -> torch.Tensor:
    shape = [2 if d is None else d for d in spec.shape]  # 2: torch.export specialises sizes 0 and 1
    return torch.zeros(shape, dtype=spec.dtype, device=device)


def _only_the_program(serialize: Any) -> Dict[str, bool]:
    """The keywords that keep weights out of torch's program artifact, where this torch has them.

    distrib writes the weights itself (safetensors), so the artifact's own
    copies are skipped; older torch releases (2.11 among them) lack the keywords and
    always include them, which is harmless (that part is never written).
    """
    import inspect

    wanted = ("serialize_state_dict", "serialize_constants", "serialize_example_inputs")
    accepted = inspect.signature(serialize).parameters
    return {name: False for name in wanted if name in accepted}


def _export(module: torch.nn.Module, specs: List[TensorSpec], where: str) -> Any:
    device = next((p.device for p in module.parameters()), torch.device("cpu"))
    examples = tuple(_example(s, device) for s in specs)
    dynamic = tuple({i: torch.export.Dim(f"input{k}_dim{i}", min=1) for i, d in enumerate(s.shape) if d is None}
                    or None for k, s in enumerate(specs))
    was_training = module.training
    module.eval()
    try:
        with torch.no_grad():
            return torch.export.export(module, examples, dynamic_shapes=dynamic, strict=False)
    except Exception as e:  # torch.export raises many types; one line is what the user needs
        first = first_line(e, limit=300)
        raise ExportError(f"{where}: torch.export cannot trace {type(module).__name__} for inputs {specs} "
                          f"({type(e).__name__}: {first}); make forward traceable (no data-dependent Python "
                          "control flow) or fix the input signature") from e
    finally:
        module.train(was_training)


def save(obj: Any, export_dir: Union[str, Any], signatures: Any = None, options: Any = None, *,
         input_signature: Optional[Sequence[TensorSpec]] = None, example_inputs: Any = None) -> None:
    """Export ``obj`` (a `distrib.Model` or ``torch.nn.Module``) for inference to directory ``export_dir``.

    Every worker calls it (as with ``model.save``): each traces the model, the
    chief writes ``export_dir`` and all return together.

    Args:
        obj: the model.
        export_dir: the directory to write (replaced if it exists).
        signatures: accepted for TF compatibility; a list of `TensorSpec` is
            taken as ``input_signature``.
        options: a `SaveOptions` (accepted; see `distrib.saved_model.options`).
        input_signature: one `TensorSpec` per positional input of ``forward``.
        example_inputs: a batch (tensor/array or tuple of them) instead of
            ``input_signature``; its first dimension becomes any-size.

    Raises:
        ExportError: no signature, or torch.export cannot trace the model.
    """
    check_save_options(options, "saved_model.save")
    export_dir = str(export_dir).rstrip("/")
    where = f"saved_model.save({export_dir})"
    if input_signature is None and isinstance(signatures, (list, tuple, TensorSpec)):
        input_signature = signatures
    module, strategy = _module_and_strategy(obj)
    specs = _specs(input_signature, example_inputs, where)
    program = _export(module, specs, where)
    from torch._export.serde.serialize import serialize

    artifact = serialize(program, **_only_the_program(serialize))
    constants = dict(program.constants)
    odd = [k for k, v in constants.items() if not isinstance(v, torch.Tensor)]
    if odd:
        raise ExportError(f"{where}: the traced program holds non-tensor constants {odd[:3]}; "
                          "distrib exports tensor programs only")
    cpu = {k: v.detach().to("cpu").contiguous().clone()
           for k, v in (*program.state_dict.items(), *constants.items())}
    state = {"state_dict": {k: cpu[k] for k in program.state_dict}, "constants": {k: cpu[k] for k in constants}}
    outputs = [f"output_{i}" for i in range(len(program.graph_signature.user_outputs))]
    signature = {"format": FORMAT, "format_version": FORMAT_VERSION, "torch_version": torch.__version__,
                 "signatures": {DEFAULT_SERVING_SIGNATURE_DEF_KEY: {
                     "inputs": [{"name": f"input_{i}", "shape": list(s.shape), "dtype": str(s.dtype).replace("torch.", "")}
                                for i, s in enumerate(specs)],
                     "outputs": outputs}}}
    files = {PROGRAM_NAME: bytes(artifact.exported_program), WEIGHTS_NAME: NestedState(state),
             SIGNATURE_NAME: json.dumps(signature, indent=1, sort_keys=True).encode()}
    write_directory(export_dir, strategy, files, {"kind": FORMAT}, who="saved_model.save")


class ConcreteFunction:
    """One serving signature: checks its inputs against the recorded specs and returns ``{name: tensor}``."""

    def __init__(self, module: torch.nn.Module, specs: List[TensorSpec], outputs: List[str], where: str) -> None:
        self._module = module
        self.input_specs = specs
        self.output_names = outputs
        self._where = where

    @property
    def structured_input_signature(self) -> Tuple[Tuple[TensorSpec, ...], Dict[str, Any]]:
        return tuple(self.input_specs), {}

    def _inputs(self, args: Sequence[Any]) -> List[torch.Tensor]:
        if len(args) != len(self.input_specs):
            raise ValueError(f"{self._where}: expected {len(self.input_specs)} input(s), got {len(args)}")
        tensors = []
        for i, (x, spec) in enumerate(zip(args, self.input_specs)):
            t = torch.as_tensor(np.asarray(x) if not isinstance(x, torch.Tensor) else x)
            if t.dtype != spec.dtype and t.is_floating_point() and spec.dtype.is_floating_point:
                t = t.to(spec.dtype)
            if not spec.is_compatible_with(t):
                raise ValueError(f"{self._where}: input_{i} has shape {tuple(t.shape)} and dtype "
                                 f"{str(t.dtype).replace('torch.', '')}; the signature expects shape "
                                 f"{tuple(spec.shape)} (None: any size) and dtype "
                                 f"{str(spec.dtype).replace('torch.', '')}")
            tensors.append(t)
        return tensors

    def __call__(self, *args: Any) -> Dict[str, torch.Tensor]:
        with torch.no_grad():
            out = self._module(*self._inputs(args))
        outs = list(out) if isinstance(out, (tuple, list)) else [out]
        return dict(zip(self.output_names, outs))


class LoadedModel:
    """What `load` returns: callable like the module, with TF's ``signatures`` mapping."""

    def __init__(self, serving: ConcreteFunction, path: str) -> None:
        self.signatures: Dict[str, ConcreteFunction] = {DEFAULT_SERVING_SIGNATURE_DEF_KEY: serving}
        self.path = path

    def __call__(self, *args: Any) -> Any:
        outs = list(self.signatures[DEFAULT_SERVING_SIGNATURE_DEF_KEY](*args).values())
        return outs[0] if len(outs) == 1 else tuple(outs)

    def __repr__(self) -> str:
        return f"LoadedModel({self.path!r}, signatures={list(self.signatures)})"


def _read_signature(data: bytes, where: str) -> Tuple[List[TensorSpec], List[str]]:
    try:
        doc = json.loads(data.decode())
        if doc.get("format") != FORMAT or doc.get("format_version") != FORMAT_VERSION:
            raise UnsafeProgramError(f"{where}: not a distrib.saved_model export (format {doc.get('format')!r}, "
                                     f"version {doc.get('format_version')!r})")
        entry = doc["signatures"][DEFAULT_SERVING_SIGNATURE_DEF_KEY]
        specs = [TensorSpec(tuple(None if d is None else int(d) for d in i["shape"]), _dtype(str(i["dtype"]), where))
                 for i in entry["inputs"]]
        outputs = [str(name) for name in entry["outputs"]]
    except (UnicodeDecodeError, json.JSONDecodeError, KeyError, TypeError, ValueError, AttributeError) as e:
        if isinstance(e, DistribError):
            raise
        raise UnsafeProgramError(f"{where}: malformed {SIGNATURE_NAME} ({type(e).__name__}: {e})") from None
    return specs, outputs


def load(export_dir: Union[str, Any], tags: Any = None, options: Any = None) -> LoadedModel:
    """Load what `save` wrote (verified, checked, never unpickled); returns a `LoadedModel`.

    Raises:
        distrib.checkpoint.files.storage.CorruptCheckpointError: incomplete or damaged export.
        UnsafeProgramError: the program uses something distrib does not load from files.
    """
    del tags
    check_load_options(options, "saved_model.load")
    export_dir = str(export_dir).rstrip("/")
    where = f"saved_model.load({export_dir})"
    manifest = storage.read_manifest(export_dir)
    specs, outputs = _read_signature(storage.read_verified(export_dir, SIGNATURE_NAME, manifest), where)
    try:
        program = json.loads(storage.read_verified(export_dir, PROGRAM_NAME, manifest).decode())
    except (UnicodeDecodeError, json.JSONDecodeError) as e:
        raise UnsafeProgramError(f"{where}: {PROGRAM_NAME} is not valid JSON ({e})") from None
    clean = sanitized_program(program, f"{export_dir}/{PROGRAM_NAME}")
    state = storage.read_state_verified(export_dir, WEIGHTS_NAME, manifest)
    if not isinstance(state, dict) or not isinstance(state.get("state_dict"), dict) \
            or not isinstance(state.get("constants"), dict):
        raise UnsafeProgramError(f"{where}: {WEIGHTS_NAME} does not hold state_dict and constants")
    from torch._export.serde.serialize import deserialize

    from distrib.saved_model.artifact import serialized_artifact

    parameters = set(_values_of(clean, "parameter_name"))
    state["state_dict"] = {k: torch.nn.Parameter(v, requires_grad=False) if k in parameters else v
                           for k, v in state["state_dict"].items()}
    try:
        program_obj = deserialize(serialized_artifact(json.dumps(clean).encode(), state["state_dict"],
                                                      state["constants"]))
        module = program_obj.module()
    except Exception as e:  # torch's deserialiser raises many types
        first = first_line(e, limit=300)
        raise UnsafeProgramError(f"{where}: torch cannot rebuild the exported program ({type(e).__name__}: "
                                 f"{first}); was it exported by torch {torch.__version__}?") from e
    return LoadedModel(ConcreteFunction(module, specs, outputs, where), export_dir)


def _values_of(node: Any, key: str) -> List[Any]:
    found: List[Any] = []
    stack = [node]
    while stack:
        item = stack.pop()
        if isinstance(item, dict):
            if key in item:
                found.append(item[key])
            stack.extend(item.values())
        elif isinstance(item, list):
            stack.extend(item)
    return found
