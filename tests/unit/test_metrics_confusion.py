"""Precision / Recall / TopKCategoricalAccuracy: aggregation across replicas, state, errors.

Their numerics are compared with Keras itself in test_tf_data_surface.py.
"""
import numpy as np
import pytest
import torch

import distrib
from distrib import metrics

from test_metrics import FakeStrategy, in_scope  # noqa: E402


@pytest.mark.parametrize("make", [lambda: metrics.Precision(thresholds=[0.3, 0.7]),
                                  lambda: metrics.Recall(top_k=2), lambda: metrics.TopKCategoricalAccuracy(k=2)])
def test_result_is_global_over_replicas(make):
    rng = np.random.default_rng(0)
    y = np.eye(4)[rng.integers(0, 4, 12)]
    p = rng.random((12, 4))
    strategy = FakeStrategy(num_replicas=2)
    mine, peer, whole = in_scope(strategy, make), in_scope(strategy, make), make()
    mine.update_state(y[:5], p[:5])
    peer.update_state(y[5:], p[5:])
    whole.update_state(y, p)
    strategy.peers = [peer]
    assert torch.allclose(mine.result(), whole.local_result())
    assert not torch.allclose(mine.local_result(), whole.local_result())


def test_state_reset_and_checkpoint():
    m = metrics.Precision(thresholds=[0.2, 0.6])
    m.update_state([1, 0, 1], [0.9, 0.4, 0.3])
    assert m.local_result().tolist() == pytest.approx([2 / 3, 1.0])
    saved = m.state_dict()
    assert set(saved) == {"true_positives", "false_positives"}
    other = metrics.Precision(thresholds=[0.2, 0.6])
    other.load_state_dict(saved)
    assert torch.equal(other.local_result(), m.local_result())
    m.reset_state()
    assert m.local_result().tolist() == [0.0, 0.0]          # 0 where undefined, as Keras
    assert metrics.get("recall").name == "recall"
    assert metrics.Recall(class_id=1, top_k=2).get_config()["class_id"] == 1


def test_errors_name_the_problem():
    with pytest.raises(ValueError, match="thresholds must be in"):
        metrics.Precision(thresholds=[1.5])
    with pytest.raises(ValueError, match="top_k=5"):
        metrics.Recall(top_k=5).update_state([[0, 1]], [[0.2, 0.8]])
    with pytest.raises(ValueError, match="class_id=3"):
        metrics.Precision(class_id=3).update_state([[0, 1]], [[0.2, 0.8]])
    with pytest.raises(ValueError, match="sample_weight"):
        metrics.Precision().update_state([1, 0], [0.6, 0.2], sample_weight=[1.0, 2.0, 3.0])
    with pytest.raises(ValueError, match="k must be"):
        metrics.TopKCategoricalAccuracy(k=0)


def test_string_lookup_errors_and_file_vocabulary(tmp_path):
    vocab = tmp_path / "vocab.txt"
    vocab.write_text("x\ny\n")
    layer = distrib.layers.StringLookup(vocabulary=str(vocab))
    assert layer(["y", "q"]).tolist() == [2, 0] and layer.vocabulary_size() == 3
    with pytest.raises(ValueError, match="twice"):
        distrib.layers.StringLookup(vocabulary=["a", "a"])
    with pytest.raises(ValueError, match="num_oov_indices=2"):
        distrib.layers.StringLookup(vocabulary=["a"], num_oov_indices=2)
    with pytest.raises(FileNotFoundError, match="missing.txt"):
        distrib.layers.StringLookup(vocabulary=str(tmp_path / "missing.txt"))
    with pytest.raises(TypeError, match="expected strings"):
        layer(torch.tensor([1, 2]))


def test_values_from_function_one_value_per_replica_in_this_process():
    seen = []

    def value_fn(ctx):
        seen.append((ctx.replica_id_in_sync_group, ctx.num_replicas_in_sync))
        return torch.tensor([ctx.replica_id_in_sync_group])

    default = distrib.get_strategy()
    assert torch.equal(default.experimental_distribute_values_from_function(value_fn), torch.tensor([0]))
    central = distrib.experimental.CentralStorageStrategy(["cpu:0", "cpu:1"])
    values = central.experimental_distribute_values_from_function(value_fn)
    assert seen == [(0, 1), (0, 2), (1, 2)]
    result = central.run(lambda v: v * 10 + 1, args=(values,))
    assert [t.tolist() for t in central.experimental_local_results(result)] == [[1], [11]]
    with pytest.raises(TypeError, match="function of a ValueContext"):
        default.experimental_distribute_values_from_function(3)
    assert distrib.experimental.ValueContext().num_replicas_in_sync == 1
