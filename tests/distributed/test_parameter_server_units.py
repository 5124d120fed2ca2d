"""The pieces of parameter-server training in one process: partitioners, cluster checks,
shipping functions by value with shared references, the ps-side optimizer, RemoteValue."""
from __future__ import annotations

import threading

import pytest
import torch

from distrib.cluster import ClusterConfigError, ClusterSpec, SimpleClusterResolver
from distrib.strategies.parameter_server import server as ps_server
from distrib.strategies.parameter_server.cluster import PSCluster
from distrib.strategies.parameter_server.partitioners import FixedShardsPartitioner, MaxSizePartitioner, MinSizePartitioner
from distrib.strategies.parameter_server.exporter import Exporter
from distrib.strategies.parameter_server.importer import Importer
from distrib.strategies.parameter_server.values import PerWorkerDataset, PerWorkerValues, RemoteValue
from distrib.strategies.parameter_server.variables import Shard, VariableInfo


def test_partitioners_split_the_first_axis():
    assert FixedShardsPartitioner(2)((10, 3), torch.float32) == [2, 1]
    assert FixedShardsPartitioner(4)((3,), torch.float32) == [3]          # never more shards than rows
    assert MinSizePartitioner(min_shard_bytes=40, max_shards=4)((10, 3), torch.float32) == [3, 1]
    assert MinSizePartitioner(min_shard_bytes=256 << 10, max_shards=2)((8, 16384), torch.float32) == [2, 1]
    assert MinSizePartitioner()((8, 16384), torch.float32) == [1, 1]      # max_shards defaults to 1
    assert MaxSizePartitioner(max_shard_bytes=48)((10, 3), torch.float32) == [3, 1]
    assert MaxSizePartitioner(max_shard_bytes=48, max_shards=2)((10, 3), torch.float32) == [2, 1]
    with pytest.raises(ValueError, match="num_shards"):
        FixedShardsPartitioner(0)


@pytest.mark.parametrize("cluster, missing", [
    ({"chief": ["h:1"], "worker": ["h:2"]}, "'ps' task"),
    ({"chief": ["h:1"], "ps": ["h:3"]}, "'worker' task"),
    ({"worker": ["h:2"], "ps": ["h:3"]}, "'chief' task"),
])
def test_cluster_needs_chief_worker_and_ps(cluster, missing):
    task = next(iter(cluster))
    with pytest.raises(ClusterConfigError, match=f"needs at least one {missing}"):
        PSCluster.from_resolver(SimpleClusterResolver(ClusterSpec(cluster), task_type=task, task_id=0))


def test_cluster_ranks_and_names():
    r = SimpleClusterResolver(ClusterSpec({"chief": ["h:1"], "worker": ["h:2", "h:3"], "ps": ["h:4", "h:5"],
                                           "evaluator": ["h:6"]}), task_type="ps", task_id=1)
    c = PSCluster.from_resolver(r)
    assert c.rpc_names == ["chief", "worker_0", "worker_1", "ps_0", "ps_1"]
    assert c.rank == 4 and c.num_workers == 2 and c.num_ps == 2
    assert c.describe("chief") == "chief (h:1)" and c.describe("worker", 1) == "worker 1 (h:3)"


class _Registry:
    def __init__(self, params):
        self.infos = {}
        for i, p in enumerate(params):
            self.infos[id(p)] = VariableInfo(i, tuple(p.shape), p.dtype, True, (Shard(0, (i, 0), 0, len(p)),))

    def info(self, p):
        return self.infos.get(id(p)) if isinstance(p, torch.Tensor) else None


def test_functions_travel_by_value_and_shared_objects_by_reference():
    strategy = object()
    model = torch.nn.Linear(2, 1)
    optimizer = torch.optim.SGD(model.parameters(), lr=0.3)
    registry = _Registry(list(model.parameters()))
    registered = []
    exporter = Exporter(strategy, registry, lambda obj: "per_worker" if isinstance(obj, PerWorkerValues) else None,
                        lambda key, opt: registered.append(key))
    per_worker = iter(PerWorkerDataset.from_recipe(("call", lambda: [10, 20, 30])))
    offset = 5

    def step(it):
        return model, optimizer, strategy, next(it) + offset

    payload, keys = exporter.export_closure(step, (per_worker,), {})
    kinds = [exporter.definitions[k].kind for k in keys]
    assert sorted(kinds) == ["module", "optimizer", "per_worker", "per_worker"]
    assert registered == [k for k in keys if exporter.definitions[k].kind == "optimizer"]
    dataset_key, iterator_key = [k for k in keys if exporter.definitions[k].kind == "per_worker"]
    assert exporter.definitions[iterator_key].deps == (dataset_key,)   # dependencies come first
    # A second export reuses the same keys (definitions are made once).
    assert exporter.export_closure(step, (per_worker,), {})[1] == keys

    worker_strategy = object()
    made = {}

    def make_optimizer(key, spec, param):
        made["spec"] = spec
        return [param(i) for g in spec["groups"] for i in g["params"]]

    def make_per_worker(recipe):
        kind, value = recipe
        return value() if kind == "call" else iter(value)

    importer = Importer(worker_strategy, make_optimizer, make_per_worker)
    for key in keys:
        d = exporter.definitions[key]
        importer.install(key, d.kind, d.payload, d.deps)
    (fn, args, kwargs), var_ids, used = importer.loads(payload)
    w_model, w_opt, w_strategy, value = fn(*args, **kwargs)
    assert w_strategy is worker_strategy and value == 15
    assert fn(*args)[3] == 25                                  # the iterator is kept between calls
    assert var_ids == {0, 1} and set(used) == set(keys)
    assert list(w_model.parameters()) == w_opt                 # the module and optimizer share the variables
    assert made["spec"]["groups"][0]["hyper"]["lr"] == 0.3


def test_ps_optimizer_shard_applies_updates_like_a_local_optimizer():
    torch.manual_seed(0)
    w = torch.randn(4, 3)
    keys = [(900, 0), (900, 1)]
    ps_server.create_variables(keys, [w[:2].clone(), w[2:].clone()])
    ps_server.create_optimizer(900, ps_server.class_name(torch.optim.Adam),
                               dict(torch.optim.Adam([torch.zeros(1)], lr=0.1).defaults), [{"lr": 0.1, "keys": keys}])
    local = torch.nn.Parameter(w.clone())
    opt = torch.optim.Adam([local], lr=0.1)
    for step in range(3):
        grad = torch.randn(4, 3)
        ps_server.apply_gradients(900, keys, [grad[:2].clone(), grad[2:].clone()], {0: {"lr": 0.1 / (step + 1)}})
        opt.param_groups[0]["lr"] = 0.1 / (step + 1)
        local.grad = grad
        opt.step()
    got = torch.cat(ps_server.read_variables(keys))
    torch.testing.assert_close(got, local.detach())


def test_remote_value_waits_and_raises():
    value = RemoteValue()
    threading.Timer(0.0, value.set_result, args=(torch.tensor(2.5),)).start()
    assert float(value.fetch()) == 2.5 and isinstance(value.get(), torch.Tensor)
    failed = RemoteValue()
    failed.set_exception(ValueError("nope"))
    with pytest.raises(ValueError, match="nope"):
        failed.fetch()
    with pytest.raises(TypeError, match="lives on the workers"):
        next(iter(PerWorkerDataset.from_recipe(("call", list))))
