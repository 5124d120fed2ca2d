"""Single-process behaviour of the strategy API: scopes, default strategy, placement, reduce."""
import json

import pytest
import torch

import distrib
from distrib.cluster import ClusterConfigError, TFConfigClusterResolver


def test_default_strategy_outside_any_scope_is_one_instance():
    assert isinstance(distrib.get_strategy(), distrib.DefaultStrategy)
    assert distrib.get_strategy() is distrib.get_strategy()
    assert not distrib.has_strategy()
    assert distrib.in_cross_replica_context()
    assert distrib.get_strategy().num_replicas_in_sync == 1
    with distrib.get_strategy().scope():
        assert not distrib.has_strategy()
    another = distrib.DefaultStrategy()  # an equivalent pass-through strategy
    with another.scope():
        assert not distrib.has_strategy() and distrib.get_strategy() is another
        module = torch.nn.Linear(2, 2)
    assert another.run(lambda m: m, (module,)) is module


def test_scopes_nest_and_restore_the_previous_strategy():
    outer, inner = distrib.OneDeviceStrategy("cpu"), distrib.OneDeviceStrategy("cpu")
    with outer.scope():
        assert distrib.get_strategy() is outer and distrib.has_strategy()
        with inner.scope():
            assert distrib.get_strategy() is inner
        assert distrib.get_strategy() is outer
    assert isinstance(distrib.get_strategy(), distrib.DefaultStrategy)


def test_run_is_a_replica_context():
    strategy = distrib.OneDeviceStrategy("cpu")
    seen = strategy.run(lambda: (distrib.in_cross_replica_context(),
                                 distrib.get_replica_context().replica_id_in_sync_group,
                                 distrib.get_strategy() is strategy))
    assert seen == (False, 0, True)
    assert distrib.in_cross_replica_context()
    assert distrib.get_replica_context() is None


def test_one_device_strategy_accepts_tf_device_names():
    assert distrib.OneDeviceStrategy("/cpu:0").device == torch.device("cpu")
    with pytest.raises(ValueError, match="unknown device"):
        distrib.OneDeviceStrategy("tpu-ish:0")
    if not torch.cuda.is_available():
        with pytest.raises(ValueError, match="no CUDA device"):
            distrib.OneDeviceStrategy("/gpu:0")


def test_reduce_gather_and_local_results_with_one_replica():
    s = distrib.OneDeviceStrategy("cpu")
    v = torch.tensor([1.0, 2.0, 3.0])
    assert s.reduce(distrib.ReduceOp.SUM, v, axis=0).item() == 6.0
    assert s.reduce(distrib.ReduceOp.MEAN, v, axis=0).item() == 2.0
    assert s.reduce(distrib.ReduceOp.SUM, v, axis=None).tolist() == [1.0, 2.0, 3.0]
    assert s.reduce("max", v, axis=0).item() == 3.0
    assert s.reduce(distrib.ReduceOp.SUM, {"a": v, "b": (v * 2,)}, axis=0)["b"][0].item() == 12.0
    assert s.gather(v, axis=0).tolist() == [1.0, 2.0, 3.0]
    assert s.experimental_local_results(v)[0] is v
    with pytest.raises(ValueError, match="reduce_op"):
        s.reduce("median", v, axis=0)


def test_compute_average_loss_divides_by_the_global_batch():
    per_example = torch.tensor([1.0, 2.0, 3.0, 2.0])
    assert distrib.nn.compute_average_loss(per_example).item() == pytest.approx(2.0)
    assert distrib.nn.compute_average_loss(per_example, global_batch_size=8).item() == pytest.approx(1.0)
    weighted = distrib.nn.compute_average_loss(per_example, sample_weight=torch.tensor([1.0, 0, 0, 1.0]))
    assert weighted.item() == pytest.approx(0.75)
    assert distrib.nn.scale_regularization_loss(torch.tensor(3.0)).item() == 3.0
    cs = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
    seen = cs.run(lambda x: distrib.nn.compute_average_loss(x), (torch.ones(4),))
    assert [v.item() for v in cs.experimental_local_results(seen)] == [0.5, 0.5]


def test_input_context_rejects_a_batch_that_does_not_divide():
    ctx = distrib.InputContext(num_input_pipelines=2, input_pipeline_id=1, num_replicas_in_sync=4)
    assert ctx.get_per_replica_batch_size(64) == 16
    with pytest.raises(ValueError, match="global batch size 65 does not divide by num_replicas_in_sync=4"):
        ctx.get_per_replica_batch_size(65)
    with pytest.raises(ValueError, match="input_pipeline_id"):
        distrib.InputContext(num_input_pipelines=2, input_pipeline_id=2)


def test_communication_options_validate_and_pick_backends():
    opts = distrib.experimental.CommunicationOptions(
        implementation=distrib.experimental.CommunicationImplementation.AUTO, timeout_seconds=5)
    assert opts.backend_for(torch.device("cpu")) == "gloo"
    assert opts.timeout == 5
    ring = distrib.CommunicationOptions(implementation=distrib.CommunicationImplementation.RING)
    assert ring.backend_for(torch.device("cuda", 0)) == "gloo"
    with pytest.raises(ValueError, match="timeout_seconds"):
        distrib.CommunicationOptions(timeout_seconds=0)
    with pytest.raises(ValueError, match="gradient_compression"):
        distrib.CommunicationOptions(gradient_compression="int8")


def test_multi_worker_strategy_rejects_ps_tasks_before_connecting():
    tf_config = {"cluster": {"worker": ["127.0.0.1:1", "127.0.0.1:2"], "ps": ["127.0.0.1:3"]},
                 "task": {"type": "worker", "index": 0}}
    resolver = TFConfigClusterResolver(json.dumps(tf_config))
    with pytest.raises(ClusterConfigError, match="MultiWorkerMirroredStrategy does not use 'ps'"):
        distrib.MultiWorkerMirroredStrategy(cluster_resolver=resolver)


def test_multi_worker_strategy_without_cluster_is_one_replica(monkeypatch):
    for var in ("TF_CONFIG", "RANK", "WORLD_SIZE", "SLURM_PROCID"):
        monkeypatch.delenv(var, raising=False)
    s = distrib.MultiWorkerMirroredStrategy()
    assert s.num_replicas_in_sync == 1 and s.is_chief
    assert s.cluster_resolver.task_type is None


def test_central_storage_with_two_cpu_replicas_matches_one_device():
    def train(strategy):
        torch.manual_seed(0)
        with strategy.scope():
            model = torch.nn.Sequential(torch.nn.Linear(5, 8), torch.nn.Tanh(), torch.nn.Linear(8, 1))
            optimizer = torch.optim.Adam(model.parameters(), lr=0.01)
        g = torch.Generator().manual_seed(1)
        xs, ys = torch.randn(10, 8, 5, generator=g), torch.randn(10, 8, 1, generator=g)
        losses = []
        for step in range(10):
            def step_fn(x, y):
                optimizer.zero_grad()
                loss = distrib.nn.compute_average_loss(((model(x) - y) ** 2).sum(1))
                loss.backward()
                optimizer.step()
                return loss.detach()
            per_replica = strategy.run(step_fn, (xs[step], ys[step]))
            losses.append(strategy.reduce(distrib.ReduceOp.SUM, per_replica, axis=None).item())
        return [p.detach().clone() for p in model.parameters()], losses

    one_weights, one_losses = train(distrib.OneDeviceStrategy("cpu"))
    cs = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
    assert cs.num_replicas_in_sync == 2
    cs_weights, cs_losses = train(cs)
    for a, b in zip(one_weights, cs_weights):
        torch.testing.assert_close(a, b)
    assert one_losses == pytest.approx(cs_losses, rel=1e-6)


def test_central_storage_with_one_device_is_one_device():
    cs = distrib.experimental.CentralStorageStrategy()
    assert cs.num_replicas_in_sync == 1
    out = cs.run(lambda x: x * 2, (torch.ones(3),))
    assert isinstance(out, torch.Tensor) and out.tolist() == [2.0, 2.0, 2.0]
