"""Scheduled functions by registered name: a parameter-server job in which no task unpickles.

By default a scheduled function travels by value (cloudpickle, `exporter`),
inside calls whose token proved the job secret. With
``DISTRIB_PS_FUNCTIONS=registered`` in every task's environment, nothing
travels as a pickle: a function travels as the *name* it was registered
under, its arguments in the closed encoding of
`distrib.strategies.parameter_server.wire`, and every shared object as a
recipe the worker follows with its own code:

* a module: the registered function that built it, with its arguments, and
  the variable behind each of its parameters (its buffers by value);
* an optimizer: its class by name, hyper-parameters and variables (as before);
* a metric created in scope: its class by name and ``get_config()``;
* a per-worker dataset: the registered ``dataset_fn``.

A worker registers functions by running the program's own definitions: a
function decorated with `remote_function` at the top level of the script,
above ``ParameterServerStrategy()`` (which a worker never leaves), or in a
module the script imports. A worker in this mode refuses a pickled payload
whoever sent it, so a job without a secret may run beyond loopback: a
stranger can call only what the program registered, with data arguments.

Example (the script every task runs):
    >>> @remote_function
    ... def build_model():
    ...     return torch.nn.Linear(3, 1)
    >>> @remote_function
    ... def train_step(model, optimizer, iterator):
    ...     x, y = next(iterator)
    ...     loss = ((model(x) - y) ** 2).mean()
    ...     optimizer.zero_grad(); loss.backward(); optimizer.step()
    ...     return loss.detach()
    >>> strategy = ParameterServerStrategy()          # workers and ps tasks serve here
    >>> with strategy.scope():
    ...     model = build_model()                     # the chief records how it was built
    ...     optimizer = torch.optim.SGD(model.parameters(), lr=0.1)
    >>> coordinator.schedule(train_step, args=(model, optimizer, iterator))
"""
from __future__ import annotations

import functools
import os
from typing import Any, Callable, Dict, Mapping, Optional, Sequence, Tuple

import torch

from distrib.errors import DistribError
from distrib.strategies.parameter_server import wire as ps_wire
from distrib.strategies.parameter_server.variables import Shard, VariableInfo
from distrib.utils.callables import display_name, where_defined

__all__ = ["remote_function", "registered_name", "registered_function", "registered_only",
           "RegisteredOnlyError", "MODE_VARIABLE", "info_to_wire", "info_from_wire", "describe"]

MODE_VARIABLE = "DISTRIB_PS_FUNCTIONS"
_MODES = ("pickled", "registered")
_RECIPE = "_distrib_recipe"
MAX_VARIABLE_ELEMENTS = 1 << 40  # a worker allocates a variable's tensor before it reads its value
_BY_NAME: Dict[str, Tuple[Callable, Callable]] = {}  # name -> (the function, what remote_function returned)
_NAME_OF: Dict[int, str] = {}  # ids of both; the entries above keep them alive, so the ids stay theirs


class RegisteredOnlyError(DistribError, TypeError):
    """Something a job of registered functions cannot send or receive (it names the object and the fix)."""


def registered_only(environ: Optional[Mapping[str, str]] = None) -> bool:
    """Whether this task sends and accepts registered functions only (``DISTRIB_PS_FUNCTIONS``)."""
    env = os.environ if environ is None else environ
    value = env.get(MODE_VARIABLE, "").strip().lower() or "pickled"
    if value not in _MODES:
        raise RegisteredOnlyError(f"{MODE_VARIABLE}={env.get(MODE_VARIABLE)!r} is not one of "
                                  f"{', '.join(_MODES)} (set the same value on every task)")
    return value == "registered"


def _default_name(fn: Callable) -> str:
    return f"{where_defined(fn)[0] or '?'}:{display_name(fn) or repr(fn)}"


def remote_function(fn: Optional[Callable] = None, *, name: Optional[str] = None) -> Any:
    """Register ``fn`` under ``name`` (default ``"module:qualname"``) for workers to run by name.

    Returns a function that calls ``fn``; when it returns a module, the
    module remembers the registered call that built it, so a worker can
    build its own copy. Registering a library function (``remote_function(
    torch.nn.functional.mse_loss)``) lets it be passed as an argument.
    Registering a name again replaces the earlier function (a notebook cell
    run twice).

    Example:
        >>> @remote_function
        ... def build_model(width):
        ...     return torch.nn.Linear(3, width)
        >>> registered_name(build_model)
        '__main__:build_model'
        >>> recipe_of(build_model(4))              # how a worker builds its own copy
        ('__main__:build_model', (4,), {})
    """
    if fn is None:
        return functools.partial(remote_function, name=name)
    if not callable(fn):
        raise TypeError(f"remote_function registers functions, not a {type(fn).__name__}")
    key = str(name) if name is not None else _default_name(fn)

    @functools.wraps(fn)
    def call(*args: Any, **kwargs: Any) -> Any:
        result = fn(*args, **kwargs)
        if isinstance(result, torch.nn.Module):
            result.__dict__[_RECIPE] = (key, args, kwargs)
        return result

    for old in _BY_NAME.get(key, ()):
        _NAME_OF.pop(id(old), None)
    _BY_NAME[key] = (fn, call)
    _NAME_OF[id(fn)] = _NAME_OF[id(call)] = key
    return call


def registered_name(fn: Any) -> Optional[str]:
    """The name ``fn`` was registered under (as itself or as the function it wraps), or None."""
    return _NAME_OF.get(id(fn))


def registered_function(name: Any) -> Callable:
    """The function registered as ``name`` in this process; `RegisteredOnlyError` naming it if none."""
    entry = _BY_NAME.get(name) if isinstance(name, str) else None
    if entry is None:
        raise RegisteredOnlyError(f"no function is registered as {name!r} on this worker: decorate it with "
                                  f"@distrib.coordinator.remote_function at the top level of the script, "
                                  f"above ParameterServerStrategy(), or in a module the script imports")
    return entry[1]


def recipe_of(module: torch.nn.Module) -> Optional[Tuple[str, tuple, dict]]:
    """``(name, args, kwargs)`` of the registered call that built ``module``, or None."""
    return module.__dict__.get(_RECIPE)


def describe(obj: Any) -> str:
    """A short name for an object a message could not carry."""
    if isinstance(obj, torch.nn.Module):
        return f"a {type(obj).__name__} module"
    name = display_name(obj)
    if name and callable(obj) and not isinstance(obj, type):
        return f"function {name}"
    return f"{type(obj).__name__} {name}" if name else f"a {type(obj).__name__}"


# ------------------------------------------------------------------ variables
def info_to_wire(info: VariableInfo) -> Tuple[Any, ...]:
    """A `VariableInfo` as plain values."""
    return (info.var_id, list(info.shape), str(info.dtype).rsplit(".", 1)[-1], info.requires_grad,
            [(s.ps, list(s.key), s.start, s.stop) for s in info.shards], info.name)


def _nonneg(value: Any, what: str) -> int:
    if type(value) is not int or value < 0:
        raise ps_wire.WireFormatError(f"parameter-server message: a variable's {what} is {value!r}")
    return value


def info_from_wire(value: Any) -> VariableInfo:
    """The `VariableInfo` of `info_to_wire`'s answer, every field checked (the bytes are untrusted)."""
    try:
        var_id, shape, dtype, requires_grad, shards, name = value
        shards = [(_nonneg(ps, "ps task"), (_nonneg(k0, "key"), _nonneg(k1, "key")),
                   _nonneg(start, "row"), _nonneg(stop, "row")) for ps, (k0, k1), start, stop in shards]
    except (TypeError, ValueError):
        raise ps_wire.WireFormatError("parameter-server message: a malformed variable reference") from None
    if not isinstance(shape, list) or len(shape) > 32 or type(requires_grad) is not bool \
            or not isinstance(name, str) or not shards:
        raise ps_wire.WireFormatError("parameter-server message: a malformed variable reference")
    elements = 1
    for n in shape:
        elements *= _nonneg(n, "dimension")
    if elements > MAX_VARIABLE_ELEMENTS:
        raise ps_wire.WireFormatError(f"parameter-server message: a variable of {elements} elements (at most "
                                      f"{MAX_VARIABLE_ELEMENTS})")
    return VariableInfo(_nonneg(var_id, "id"), tuple(shape),
                        ps_wire.dtype_named(dtype), requires_grad,
                        tuple(Shard(ps, key, start, stop) for ps, key, start, stop in shards), name)


def bind_parameters(module: torch.nn.Module, params: Sequence[Tuple[str, Any]],
                    buffers: Sequence[Tuple[str, Any]], built_by: str) -> torch.nn.Module:
    """Give ``module`` (just built by ``built_by`` on a worker) the chief's variables and buffers.

    Its parameter names and shapes must be the chief's, or the worker's build
    is not the chief's module: `RegisteredOnlyError` naming the first difference.
    """
    if not isinstance(module, torch.nn.Module):
        raise RegisteredOnlyError(f"{built_by} built {describe(module)} on this worker, not a module")
    own = dict(module.named_parameters(remove_duplicate=False))
    names = [n for n, _ in params]
    if sorted(own) != sorted(names):
        missing, extra = sorted(set(names) - set(own)), sorted(set(own) - set(names))
        raise RegisteredOnlyError(f"{built_by} built a module on this worker whose parameters differ from "
                                  f"the chief's (missing {missing[:3]}, extra {extra[:3]}): build the model "
                                  f"only with registered functions, and change it only inside them")
    for name, value in list(params) + list(buffers):
        if not isinstance(name, str) or not isinstance(value, torch.Tensor):
            raise ps_wire.WireFormatError("parameter-server message: a malformed module recipe")
        owner, _, leaf = name.rpartition(".")
        target = module.get_submodule(owner) if owner else module
        current = getattr(target, leaf, None)
        if not isinstance(current, torch.Tensor) or tuple(current.shape) != tuple(value.shape):
            got = None if current is None else tuple(current.shape)
            raise RegisteredOnlyError(f"{built_by} built a module on this worker whose {name!r} has shape "
                                      f"{got}, not the chief's {tuple(value.shape)}")
        if isinstance(value, torch.nn.Parameter):   # a variable: the worker's tensor that steps refill
            setattr(target, leaf, value)
        else:                                        # by value (ties the build made stay as they are)
            current.data = value.to(current.dtype)
    return module
