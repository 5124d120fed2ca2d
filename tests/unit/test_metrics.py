"""distrib.metrics: values, Keras name resolution, checkpoint state and cross-replica aggregation."""
import json

import numpy as np
import pytest
import torch

from distrib import metrics
from distrib.comm.collective import ReduceOp
from distrib.metrics.packing import pack
from distrib.strategies import context


class FakeStrategy:
    """A strategy stand-in: ``reduce`` adds the peers' packed states that the test supplies."""

    def __init__(self, num_replicas=1):
        self.num_replicas_in_sync = num_replicas
        self.device = torch.device("cpu")
        self.is_chief = True
        self.collective = None   # no other processes (metrics treat None as nothing to replay or fold)
        self.peers = []          # metrics (or metric lists) whose state the "other replicas" hold
        self.calls = []

    @property
    def multi_replica(self):
        return self.num_replicas_in_sync > 1

    def reduce(self, op, value, axis=None):
        self.calls.append((op, value.dtype, tuple(value.shape), axis))
        total = value.clone()
        for peer in self.peers:
            peer_list = peer if isinstance(peer, list) else [peer]
            total += torch.cat([pack(m.state_tensors()) for m in peer_list])
        return total


@pytest.fixture
def scope():
    """Run the test inside a one-replica fake strategy's scope; yields that strategy."""
    strategy = FakeStrategy()
    context.push(strategy)
    try:
        yield strategy
    finally:
        context.pop(strategy)


def in_scope(strategy, fn):
    context.push(strategy)
    try:
        return fn()
    finally:
        context.pop(strategy)


def value(metric):
    return float(metric.result())


# --------------------------------------------------------------- values
def test_mean_and_sum(scope):
    m = metrics.Mean()
    m.update_state(torch.tensor([1.0, 3.0, 5.0, 7.0]))
    assert value(m) == 4.0
    m.update_state(torch.tensor([10.0]))
    assert value(m) == pytest.approx(26 / 5)
    m.reset_state()
    assert value(m) == 0.0
    m.update_state([1.0, 3.0, 5.0, 7.0], sample_weight=[1.0, 1.0, 0.0, 0.0])
    assert value(m) == 2.0
    s = metrics.Sum()
    s.update_state(torch.tensor([1.0, 3.0, 5.0, 7.0]), sample_weight=torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert value(s) == 4.0


def test_mean_of_rank_two_values_is_per_example(scope):
    m = metrics.Mean()
    m.update_state(torch.tensor([[1.0, 3.0], [5.0, 7.0]]), sample_weight=torch.tensor([1.0, 0.0]))
    assert value(m) == 2.0


def test_accuracies_hand_values(scope):
    sca = metrics.SparseCategoricalAccuracy()
    sca.update_state(torch.tensor([2, 1]), torch.tensor([[0.1, 0.6, 0.3], [0.05, 0.95, 0.0]]))
    assert value(sca) == 0.5
    sca.update_state(torch.tensor([[0], [0]]), torch.tensor([[0.9, 0.1, 0.0], [0.8, 0.1, 0.1]]))
    assert value(sca) == 0.75

    ca = metrics.CategoricalAccuracy()
    ca.update_state(torch.tensor([[0, 0, 1], [0, 1, 0]]), torch.tensor([[0.1, 0.9, 0.8], [0.05, 0.95, 0]]))
    assert value(ca) == 0.5

    ba = metrics.BinaryAccuracy()
    ba.update_state(torch.tensor([[1], [1], [0], [0]]), torch.tensor([[0.98], [1.0], [0.0], [0.6]]))
    assert value(ba) == 0.75
    ba_strict = metrics.BinaryAccuracy(threshold=0.99)
    ba_strict.update_state(torch.tensor([1.0, 0.0]), torch.tensor([0.98, 0.2]))
    assert value(ba_strict) == 0.5

    acc = metrics.Accuracy()
    acc.update_state(torch.tensor([[1], [2], [3], [4]]), torch.tensor([[0], [2], [3], [4]]),
                     sample_weight=torch.tensor([1.0, 1.0, 0.0, 0.0]))
    assert value(acc) == 0.5


def test_regression_metrics(scope):
    mse, mae = metrics.MeanSquaredError(), metrics.MeanAbsoluteError()
    y, p = torch.tensor([[0.0, 1.0], [0.0, 0.0]]), torch.tensor([[1.0, 1.0], [0.0, 0.0]])
    mse.update_state(y, p)
    mae.update_state(y, p)
    assert value(mse) == 0.25 and value(mae) == 0.25
    assert mse.direction == "down" and metrics.SparseCategoricalAccuracy().direction == "up"


def test_metric_shape_errors_name_both_shapes(scope):
    with pytest.raises(ValueError, match=r"\(3,\).*\(2, 4\)"):
        metrics.SparseCategoricalAccuracy().update_state(torch.tensor([1, 2, 3]), torch.zeros(2, 4))
    with pytest.raises(ValueError, match=r"\(2,\).*\(2, 4\).*sparse_categorical_accuracy"):
        metrics.CategoricalAccuracy().update_state(torch.tensor([1, 2]), torch.zeros(2, 4))


def test_auc_hand_example_and_against_sklearn(scope):
    small = metrics.AUC(num_thresholds=3)
    small.update_state(torch.tensor([0, 0, 1, 1]), torch.tensor([0.0, 0.5, 0.3, 0.9]))
    assert value(small) == pytest.approx(0.75)

    sklearn_metrics = pytest.importorskip("sklearn.metrics")
    rng = np.random.default_rng(0)
    y = rng.integers(0, 2, 500)
    scores = np.clip(0.3 * y + rng.random(500) * 0.7, 0, 1)
    weights = rng.random(500)
    auc = metrics.AUC(num_thresholds=2000)
    auc.update_state(torch.tensor(y[:200]), torch.tensor(scores[:200]), sample_weight=torch.tensor(weights[:200]))
    auc.update_state(torch.tensor(y[200:]), torch.tensor(scores[200:]), sample_weight=torch.tensor(weights[200:]))
    expected = sklearn_metrics.roc_auc_score(y, scores, sample_weight=weights)
    assert value(auc) == pytest.approx(expected, abs=2e-3)

    pr = metrics.AUC(num_thresholds=2000, curve="PR")
    pr.update_state(torch.tensor(y), torch.tensor(scores))
    assert value(pr) == pytest.approx(sklearn_metrics.average_precision_score(y, scores), abs=2e-2)


def test_auc_from_logits_and_bad_arguments(scope):
    a, b = metrics.AUC(from_logits=True), metrics.AUC()
    logits = torch.tensor([-2.0, 0.5, 1.0, -0.3])
    a.update_state(torch.tensor([0, 1, 1, 0]), logits)
    b.update_state(torch.tensor([0, 1, 1, 0]), torch.sigmoid(logits))
    assert value(a) == value(b) == 1.0
    with pytest.raises(ValueError, match="curve"):
        metrics.AUC(curve="PRGAIN")
    with pytest.raises(ValueError, match="num_thresholds"):
        metrics.AUC(num_thresholds=1)


def test_update_state_never_syncs_the_host(scope, monkeypatch):
    """update_state must not call .item()/float()/bool()/tolist() on tensors (no host sync)."""
    all_metrics = [metrics.Mean(), metrics.Sum(), metrics.SparseCategoricalAccuracy(),
                   metrics.CategoricalAccuracy(), metrics.BinaryAccuracy(), metrics.Accuracy(),
                   metrics.MeanSquaredError(), metrics.MeanAbsoluteError(), metrics.AUC()]
    labels, probs = torch.tensor([0, 1, 1]), torch.tensor([[0.7, 0.3], [0.2, 0.8], [0.6, 0.4]])
    one_hot = torch.nn.functional.one_hot(labels, 2)
    w = torch.tensor([1.0, 2.0, 0.5])

    def forbidden(*args, **kwargs):
        raise AssertionError("host synchronisation inside update_state")

    for name in ("item", "__bool__", "__float__", "__int__", "tolist", "numpy"):
        monkeypatch.setattr(torch.Tensor, name, forbidden)
    calls = {
        metrics.Mean: (probs[:, 1],), metrics.Sum: (probs[:, 1],),
        metrics.SparseCategoricalAccuracy: (labels, probs), metrics.CategoricalAccuracy: (one_hot, probs),
        metrics.BinaryAccuracy: (labels, probs[:, 1]), metrics.Accuracy: (labels, labels),
        metrics.MeanSquaredError: (probs, probs.flip(1)), metrics.MeanAbsoluteError: (probs, probs.flip(1)),
        metrics.AUC: (labels, probs[:, 1]),
    }
    for m in all_metrics:
        args = calls[type(m)]
        if len(args) == 1:
            m.update_state(args[0], sample_weight=w)
        else:
            m.update_state(*args, sample_weight=w)
    monkeypatch.undo()
    assert value(all_metrics[2]) == pytest.approx(3 / 3.5)


@pytest.mark.cuda
@pytest.mark.skipif(not torch.cuda.is_available(), reason="needs a CUDA device")
def test_metric_state_follows_inputs_to_the_accelerator(scope):
    auc, acc = metrics.AUC(num_thresholds=3), metrics.SparseCategoricalAccuracy()
    auc.update_state(torch.tensor([0, 0, 1, 1], device="cuda"), torch.tensor([0.0, 0.5, 0.3, 0.9], device="cuda"))
    acc.update_state(torch.tensor([1], device="cuda"), torch.tensor([[0.2, 0.8]], device="cuda"))
    assert auc.true_positives.device.type == "cuda" and acc.total.device.type == "cuda"
    assert value(auc) == pytest.approx(0.75) and value(acc) == 1.0
    assert acc.state_dict()["total"].device.type == "cpu"


# ------------------------------------------------------ state and names
def test_state_dict_round_trip_and_validation(scope):
    m = metrics.SparseCategoricalAccuracy(name="acc")
    m.update_state(torch.tensor([1, 0, 1]), torch.tensor([[0.1, 0.9], [0.2, 0.8], [0.3, 0.7]]))
    state = m.state_dict()
    assert set(state) == {"total", "count"} and all(isinstance(t, torch.Tensor) for t in state.values())
    fresh = metrics.SparseCategoricalAccuracy(name="acc")
    fresh.load_state_dict(state)
    assert value(fresh) == value(m) == pytest.approx(2 / 3)
    state["total"] += 100  # a copy: the metric is unaffected
    assert value(m) == pytest.approx(2 / 3)

    with pytest.raises(ValueError, match="state_dict has keys"):
        fresh.load_state_dict({"total": torch.tensor(1.0)})
    auc = metrics.AUC(num_thresholds=5)
    before = auc.state_dict()
    bad = {k: torch.zeros(3) for k in before}
    with pytest.raises(ValueError, match="shape"):
        auc.load_state_dict(bad)
    assert all(torch.equal(auc.state_dict()[k], before[k]) for k in before)  # unchanged


def test_get_config_round_trip(scope):
    for original in (metrics.BinaryAccuracy(name="ba", threshold=0.7), metrics.AUC(num_thresholds=50, curve="PR"),
                     metrics.Mean(name="m")):
        config = json.loads(json.dumps(metrics.serialize(original)))
        restored = metrics.deserialize(config)
        assert type(restored) is type(original) and restored.get_config() == original.get_config()
    with pytest.raises(ValueError, match="cannot deserialise metric class"):
        metrics.deserialize({"class_name": "subprocess.Popen", "config": {}})


@pytest.mark.parametrize("loss, expected", [
    ("sparse_categorical_crossentropy", metrics.SparseCategoricalAccuracy),
    ("categorical_crossentropy", metrics.CategoricalAccuracy),
    ("binary_crossentropy", metrics.BinaryAccuracy),
    ("mse", metrics.Accuracy),
    (None, metrics.Accuracy),
])
def test_accuracy_resolved_from_loss_name(scope, loss, expected):
    m = metrics.get("accuracy", loss=loss)
    assert type(m) is expected and m.name == "accuracy"
    assert metrics.get("acc", loss=loss).name == "acc"


def test_accuracy_resolved_from_loss_objects_and_torch_modules(scope):
    from distrib import losses

    assert type(metrics.get("accuracy", loss=losses.SparseCategoricalCrossentropy(from_logits=True))) \
        is metrics.SparseCategoricalAccuracy
    assert type(metrics.get("accuracy", loss=torch.nn.CrossEntropyLoss())) is metrics.SparseCategoricalAccuracy
    assert type(metrics.get("accuracy", loss=torch.nn.BCEWithLogitsLoss())) is metrics.BinaryAccuracy
    assert type(metrics.get("accuracy", loss=losses.CategoricalCrossentropy())) is metrics.CategoricalAccuracy


def test_accuracy_resolved_from_shapes_when_loss_does_not_decide(scope):
    assert type(metrics.get("accuracy", loss="mse", y_true_shape=(8,), y_pred_shape=(8, 10))) \
        is metrics.SparseCategoricalAccuracy
    assert type(metrics.get("accuracy", y_true_shape=(8, 1), y_pred_shape=(8, 1))) is metrics.BinaryAccuracy
    assert type(metrics.get("accuracy", y_true_shape=(8, 10), y_pred_shape=(8, 10))) is metrics.CategoricalAccuracy


def test_get_names_objects_and_callables(scope):
    assert type(metrics.get("sparse_categorical_accuracy")) is metrics.SparseCategoricalAccuracy
    assert (type(metrics.get("mse")), metrics.get("mse").name) == (metrics.MeanSquaredError, "mse")
    assert type(metrics.get("mae")) is metrics.MeanAbsoluteError
    assert type(metrics.get("auc")) is metrics.AUC
    ce = metrics.get("sparse_categorical_crossentropy")
    ce.update_state(torch.tensor([0]), torch.tensor([[0.5, 0.5]]))
    assert value(ce) == pytest.approx(np.log(2), rel=1e-5) and ce.direction == "down"
    obj = metrics.Mean()
    assert metrics.get(obj) is obj

    def half(y_true, y_pred):
        return (y_true - y_pred) / 2

    fn_metric = metrics.get(half)
    fn_metric.update_state(torch.tensor([2.0, 4.0]), torch.tensor([0.0, 0.0]))
    assert fn_metric.name == "half" and value(fn_metric) == 1.5
    with pytest.raises(ValueError, match="unknown metric 'f2'"):
        metrics.get("f2")


def test_metric_captures_the_strategy_of_its_scope(scope):
    assert metrics.Mean().distribute_strategy is scope
    other = FakeStrategy()
    assert in_scope(other, metrics.Mean).distribute_strategy is other


# --------------------------------------------------- cross-replica results
def make_replicas(factory):
    """Two 'replicas' of one metric, each with a 2-replica fake strategy that sees the other's state."""
    s0, s1 = FakeStrategy(2), FakeStrategy(2)
    m0, m1 = in_scope(s0, factory), in_scope(s1, factory)
    s0.peers, s1.peers = [m1], [m0]
    return (m0, s0), (m1, s1)


def test_result_is_global_and_identical_on_every_replica():
    (m0, s0), (m1, s1) = make_replicas(metrics.SparseCategoricalAccuracy)
    probs = torch.tensor([[0.1, 0.9], [0.8, 0.2], [0.3, 0.7], [0.6, 0.4]])
    m0.update_state(torch.tensor([1, 0, 1, 0]), probs)   # 4 of 4 right
    m1.update_state(torch.tensor([0, 1, 1, 1]), probs)   # 1 of 4 right
    assert float(m0.local_result()) == 1.0 and float(m1.local_result()) == 0.25
    assert s0.calls == [] and s1.calls == []              # local_result does not communicate
    assert float(m0.result()) == float(m1.result()) == pytest.approx(5 / 8)
    assert s0.calls == [(ReduceOp.SUM, torch.float64, (2,), None)]  # one packed all-reduce


def test_global_auc_equals_pooled_auc():
    (m0, _), (m1, _) = make_replicas(lambda: metrics.AUC(num_thresholds=50))
    pooled = metrics.AUC(num_thresholds=50, name="pooled")
    rng = np.random.default_rng(1)
    y, p = torch.tensor(rng.integers(0, 2, 40)), torch.tensor(rng.random(40))
    m0.update_state(y[:25], p[:25])
    m1.update_state(y[25:], p[25:])
    pooled.update_state(y, p)
    assert float(m0.result()) == pytest.approx(float(pooled.local_result()))
    assert float(m0.result()) == float(m1.result())


def test_global_results_uses_one_collective_for_many_metrics():
    s0, s1 = FakeStrategy(2), FakeStrategy(2)
    build = lambda: [metrics.Mean("loss"), metrics.SparseCategoricalAccuracy("accuracy")]  # noqa: E731
    r0, r1 = in_scope(s0, build), in_scope(s1, build)
    s0.peers, s1.peers = [r1], [r0]
    r0[0].update_state(torch.tensor([1.0, 2.0]))
    r1[0].update_state(torch.tensor([3.0, 6.0]))
    r0[1].update_state(torch.tensor([0]), torch.tensor([[0.9, 0.1]]))
    r1[1].update_state(torch.tensor([0]), torch.tensor([[0.1, 0.9]]))
    out0, out1 = metrics.global_results(r0), metrics.global_results(r1)
    assert len(s0.calls) == 1
    assert {k: float(v) for k, v in out0.items()} == {"loss": 3.0, "accuracy": 0.5}
    assert {k: float(v) for k, v in out0.items()} == {k: float(v) for k, v in out1.items()}
    with pytest.raises(ValueError, match="unique"):
        metrics.global_results([r0[0], r0[0]])


class CountAbove(metrics.Metric):
    """A user metric written Keras-style: state from add_variable, value from result_from_states."""

    direction = "up"

    def __init__(self, name="above"):
        super().__init__(name)
        self.hits = self.add_variable(name="hits")

    def update_state(self, y_true, y_pred=None, sample_weight=None):
        self.hits.add_((torch.as_tensor(y_pred) > 0.5).sum())

    def result_from_states(self, states):
        return states["hits"]


def test_user_metric_subclass_is_aggregated_too():
    (m0, _), (m1, _) = make_replicas(CountAbove)
    m0.update_state(None, torch.tensor([0.9, 0.1, 0.7]))
    m1.update_state(None, torch.tensor([0.6]))
    assert float(m0.local_result()) == 2.0 and float(m0.result()) == float(m1.result()) == 3.0
    assert repr(m0) == "CountAbove(name='above')"
    with pytest.raises(ValueError, match="aggregation 'mean' is not supported"):
        m0.add_variable(name="x", aggregation="mean")


def test_one_replica_result_does_not_communicate(scope):
    m = metrics.Mean()
    m.update_state(torch.tensor([1.0]))
    m.result()
    metrics.global_results([m])
    assert scope.calls == []
