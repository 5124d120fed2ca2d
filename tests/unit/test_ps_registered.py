"""Registered functions on their own: the chief's closed export and a worker's import, in one process."""
from __future__ import annotations

import pickle

import pytest
import torch

import distrib
from distrib.coordinator import RegisteredOnlyError, remote_function
from distrib.strategies.parameter_server import registered, wire as ps_wire
from distrib.strategies.parameter_server.exporter import Exporter
from distrib.strategies.parameter_server.importer import Importer
from distrib.strategies.parameter_server.values import PerWorkerValues
from distrib.strategies.parameter_server.variables import Shard, VariableInfo


@remote_function
def tied_model(width):
    torch.manual_seed(3)
    model = torch.nn.Sequential(torch.nn.Embedding(5, width), torch.nn.Linear(width, 5, bias=False),
                                torch.nn.BatchNorm1d(5))
    model[1].weight = model[0].weight  # tied: one variable, two owners
    return model


@remote_function(name="steps/apply")
def apply(model, tokens, scale=1.0):
    return model(tokens) * scale


@remote_function
def numbers():
    return [1, 2, 3]


class _Registry:
    """Stand-in for the chief's `VariableRegistry`: every parameter of the given modules is a variable."""

    def __init__(self, *modules):
        self._infos = {}
        for module in modules:
            for p in module.parameters():
                var_id = len(self._infos)
                self._infos[id(p)] = VariableInfo(var_id, tuple(p.shape), p.dtype, True,
                                                  (Shard(0, (var_id, 0), 0, p.shape[0]),), f"v{var_id}")

    def info(self, tensor):
        return self._infos.get(id(tensor))


def _exporter(strategy, registry, optimizers=None):
    seen = optimizers if optimizers is not None else []

    def classify(obj):
        return "per_worker" if isinstance(obj, PerWorkerValues) else None

    return Exporter(strategy, registry, classify, lambda key, opt: seen.append(key), closed=True)


def _importer(strategy):
    return Importer(strategy, lambda key, spec, param: ("optimizer", spec), lambda recipe: ("made", recipe),
                    registered_only=True)


def test_a_module_travels_as_its_recipe_and_the_worker_binds_the_chiefs_variables():
    strategy = distrib.get_strategy()
    model = tied_model(4)
    with torch.no_grad():
        model[2].running_mean.add_(0.5)  # a buffer the chief changed after building
    registry = _Registry(model)
    exporter = _exporter(strategy, registry)
    tokens = torch.tensor([0, 3, 4])
    payload, keys = exporter.export_closure(apply, (model, tokens), {"scale": 2.0})
    assert ps_wire.is_message(payload) and all(ps_wire.is_message(exporter.definitions[k].payload) for k in keys)

    importer = _importer(strategy)
    for key in keys:
        d = exporter.definitions[key]
        importer.install(key, d.kind, d.payload, d.deps)
    (fn, args, kwargs), var_ids, used = importer.loads_call(payload)
    assert fn is apply and kwargs == {"scale": 2.0} and used == set(keys)
    worker_model = args[0]
    assert worker_model is not model
    assert worker_model[0].weight is worker_model[1].weight            # still tied
    assert worker_model[0].weight is importer.params[0]                  # the worker's copy of variable 0
    assert var_ids == {0, 1, 2}             # the tied weight is one variable; the norm has two more
    assert torch.equal(worker_model[2].running_mean, model[2].running_mean)
    for p in model.parameters():                                         # what a step reads from the ps
        importer.params[registry.info(p).var_id].data = p.detach().clone()
    worker_model.eval(), model.eval()
    assert torch.equal(fn(*args, **kwargs), apply(model, tokens, scale=2.0))


def test_the_chief_names_what_it_cannot_send():
    strategy = distrib.get_strategy()
    model = tied_model(2)
    exporter = _exporter(strategy, _Registry(model))
    with pytest.raises(RegisteredOnlyError, match=r"the scheduled function .*<lambda> is not registered"):
        exporter.export_closure(lambda m: m, (model,), {})
    plain = torch.nn.Linear(2, 2)
    with pytest.raises(RegisteredOnlyError, match="a Linear module was not built by a registered function"):
        _exporter(strategy, _Registry(plain)).export_closure(apply, (plain, None), {})
    with pytest.raises(RegisteredOnlyError, match="a ReLU module was not built by a registered function"):
        exporter.export_closure(apply, (torch.nn.ReLU(), None), {})
    with pytest.raises(RegisteredOnlyError, match="function len is not registered"):
        exporter.export_closure(apply, (model, len), {})
    with pytest.raises(RegisteredOnlyError, match="cannot send a set"):
        exporter.export_closure(apply, (model, {1, 2}), {})


def test_a_registered_module_without_variables_travels_by_value():
    """Built by a registered function outside the scope: the worker builds it and takes the chief's values."""
    strategy = distrib.get_strategy()
    frozen = tied_model(2)
    with torch.no_grad():
        frozen[0].weight.mul_(3.0)   # changed on the chief after building: the worker gets these values
    exporter = _exporter(strategy, _Registry())
    payload, keys = exporter.export_closure(apply, (frozen, torch.tensor([1, 2])), {})
    importer = _importer(strategy)
    for key in keys:
        d = exporter.definitions[key]
        importer.install(key, d.kind, d.payload, d.deps)
    (fn, args, kwargs), var_ids, _ = importer.loads_call(payload)
    assert var_ids == set() and importer.params == {}
    assert args[0][0].weight is args[0][1].weight and torch.equal(args[0][0].weight, frozen[0].weight)
    frozen.eval(), args[0].eval()
    assert torch.equal(fn(*args, **kwargs), apply(frozen, torch.tensor([1, 2])))


def test_a_per_worker_dataset_travels_as_its_registered_function():
    strategy = distrib.get_strategy()
    exporter = _exporter(strategy, _Registry())
    per_worker = PerWorkerValues.from_recipe(("call", numbers))
    payload, keys = exporter.export_closure(apply, (None, per_worker), {})
    importer = _importer(strategy)
    for key in keys:
        d = exporter.definitions[key]
        importer.install(key, d.kind, d.payload, d.deps)
    (_, args, _), _, _ = importer.loads_call(payload)
    assert args[1] == ("made", ("call", numbers))
    with pytest.raises(RegisteredOnlyError, match=r"function .*<lambda> is not registered"):
        exporter.export_closure(apply, (None, PerWorkerValues.from_recipe(("call", lambda: 0))), {})


def test_a_worker_refuses_pickles_and_malformed_references(tmp_path):
    strategy = distrib.get_strategy()
    importer = _importer(strategy)
    marker = tmp_path / "loaded"
    evil = pickle.dumps(_Marker(str(marker)))
    for kind in ("module", "optimizer", "per_worker", "metric"):
        with pytest.raises(RegisteredOnlyError, match="refused a pickled one"):
            importer.install(7, kind, evil, ())
    with pytest.raises(RegisteredOnlyError, match="refused a pickled one"):
        importer.loads_call(evil)
    assert not marker.exists()

    fn_ref, arg_ref = object(), object()

    def call_with(fn_answer, arg_answer=None):
        answers = {id(fn_ref): fn_answer, id(arg_ref): arg_answer}
        args = (arg_ref,) if arg_answer is not None else ()
        return ps_wire.encode((fn_ref, args, {}), reference=lambda o: answers.get(id(o)))

    with pytest.raises(RegisteredOnlyError, match="no function is registered as 'builtins:eval'"):
        importer.loads_call(call_with(("fn", "builtins:eval")))
    for answer in [("obj", 99), ("obj", [1]), ("strategy", 1), ("class", "os:system"), ("param", "x"),
                   ("param", (0, [2**20, 2**20, 2**20], "float32", True, [(0, [0, 0], 0, 1)], "")),
                   ("param", (0, [2], "object", True, [(0, [0, 0], 0, 2)], "")),
                   ("param", (-1, [2], "float32", True, [(0, [0, 0], 0, 2)], ""))]:
        with pytest.raises(ps_wire.WireFormatError):
            importer.loads_call(call_with(("fn", "steps/apply"), answer))
        with pytest.raises(ps_wire.WireFormatError):
            importer.loads_call(call_with(answer))
    assert importer.params == {}                                          # nothing was allocated
    enc = lambda value: ps_wire.encode(value)[4:]  # noqa: E731 - a value's bytes without the magic
    count = lambda n: n.to_bytes(4, "big")           # noqa: E731
    inner = b"t" + count(2) + enc("fn") + b"R" + enc(("fn", "steps/apply"))   # a reference inside a reference
    with pytest.raises(ps_wire.WireFormatError, match="a reference where none is expected"):
        importer.loads_call(b"DPW2" + b"t" + count(3) + b"R" + inner + enc(()) + enc({}))
    assert importer.loads_call(b"DPW2" + b"t" + count(3) + b"R" + enc(("fn", "steps/apply")) + enc(()) + enc({}))
    with pytest.raises(ps_wire.WireFormatError, match="not a scheduled call"):
        importer.loads_call(ps_wire.encode(("steps/apply", (), {})))
    with pytest.raises(ps_wire.WireFormatError, match="a reference where none is expected"):
        ps_wire.decode(call_with(("fn", "steps/apply")))


def test_a_worker_whose_build_differs_from_the_chiefs_says_which_parameter():
    chief = tied_model(4)
    worker = tied_model(3)
    params = list(chief.named_parameters(remove_duplicate=False))
    with pytest.raises(RegisteredOnlyError, match=r"'0.weight' has shape \(5, 3\), not the chief's \(5, 4\)"):
        registered.bind_parameters(worker, params, [], "the registered function 'tied_model'")
    with pytest.raises(RegisteredOnlyError, match=r"parameters differ from the chief's \(missing \['extra'\]"):
        registered.bind_parameters(tied_model(4), params + [("extra", torch.zeros(1))], [], "f")


def test_registering_a_name_again_replaces_the_function():
    first = remote_function(lambda: 1, name="tests/again")
    second = remote_function(lambda: 2, name="tests/again")
    assert registered.registered_function("tests/again")() == 2
    assert registered.registered_name(first) is None and registered.registered_name(second) == "tests/again"


def test_the_mode_is_read_strictly():
    assert registered.registered_only({}) is False
    assert registered.registered_only({"DISTRIB_PS_FUNCTIONS": "pickled"}) is False
    assert registered.registered_only({"DISTRIB_PS_FUNCTIONS": " Registered "}) is True
    with pytest.raises(RegisteredOnlyError, match="DISTRIB_PS_FUNCTIONS='yes' is not one of pickled, registered"):
        registered.registered_only({"DISTRIB_PS_FUNCTIONS": "yes"})


class _Marker:
    def __init__(self, path):
        self.path = path

    def __reduce__(self):
        return (open, (self.path, "w"))
