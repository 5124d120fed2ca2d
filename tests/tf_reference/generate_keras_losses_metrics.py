"""Record what Keras 3.15 (tf.keras in TensorFlow 2.21) computes for losses and metrics, as JSON.

Run with the TensorFlow virtual environment (never distrib's), on CPU, one thread:

    CUDA_VISIBLE_DEVICES= /work/tf-venv/bin/python tests/tf_reference/generate_keras_losses_metrics.py

It writes ``tests/data/tf_reference/keras_losses_metrics.json``:

* ``inputs``: named input sets ``{"y_true", "y_pred", "sample_weight"}`` (seeded numpy);
* ``losses``: one case per (loss class, constructor config, input set, reduction,
  with/without sample weight): the result, or the error Keras raised;
* ``metrics``: one case per (metric class, config, list of updates): the
  result after every ``update_state``;
* ``ps_tutorial``: the parameter-server tutorial's ``loss="mse"`` with targets
  ``(64,)`` and outputs ``(64, 10)``: Keras 3's error, and the value of
  tf.keras 2's reading (targets expanded to ``(64, 1)`` and broadcast).
"""
import json
import os
from pathlib import Path

os.environ.setdefault("CUDA_VISIBLE_DEVICES", "")
os.environ.setdefault("TF_CPP_MIN_LOG_LEVEL", "3")

import numpy as np  # noqa: E402

OUT = Path(__file__).resolve().parent.parent / "data" / "tf_reference" / "keras_losses_metrics.json"
B, C, T = 6, 4, 3
REDUCTIONS = ["sum_over_batch_size", "sum", "none", None, "mean", "mean_with_sample_weight"]


def _inputs():
    rng = np.random.RandomState(23)
    f = lambda a: np.asarray(a, dtype=np.float32)  # noqa: E731
    out = {}

    def add(name, y, p, w):
        out[name] = {"y_true": np.asarray(y).tolist(), "y_pred": f(p).tolist(), "sample_weight": f(w).tolist()}

    w_b = rng.uniform(0.0, 2.0, (B,))
    w_bt = rng.uniform(0.0, 2.0, (B, T))
    # real-valued targets and predictions
    add("real_r1", f(rng.normal(size=(B,))), rng.normal(size=(B,)), w_b)
    add("real_r2", f(rng.normal(size=(B, C))), rng.normal(size=(B, C)), w_b)
    add("real_r3", f(rng.normal(size=(B, T, C))), rng.normal(size=(B, T, C)), w_bt)
    add("real_expand", f(rng.normal(size=(B,))), rng.normal(size=(B, 1)), w_b)
    add("real_broadcast", f(rng.normal(size=(B, 1))), rng.normal(size=(B, C)), w_b)
    # positive values (MSLE, MAPE, Poisson)
    add("pos_r1", f(rng.uniform(0.0, 2.0, (B,))), rng.uniform(0.1, 2.0, (B,)), w_b)
    add("pos_r2", f(rng.uniform(0.0, 2.0, (B, C))), rng.uniform(0.1, 2.0, (B, C)), w_b)
    add("pos_r3", f(rng.uniform(0.0, 2.0, (B, T, C))), rng.uniform(0.1, 2.0, (B, T, C)), w_bt)
    # binary labels against probabilities / logits
    add("bin_r1", f(rng.randint(0, 2, (B,))), rng.uniform(0.02, 0.98, (B,)), w_b)
    add("bin_r2", f(rng.randint(0, 2, (B, C))), rng.uniform(0.02, 0.98, (B, C)), w_b)
    add("bin_r3", f(rng.randint(0, 2, (B, T, C))), rng.uniform(0.02, 0.98, (B, T, C)), w_bt)
    add("bin_expand", f(rng.randint(0, 2, (B,))), rng.uniform(0.02, 0.98, (B, 1)), w_b)
    add("binlogit_r1", f(rng.randint(0, 2, (B,))), 2 * rng.normal(size=(B,)), w_b)
    add("binlogit_r2", f(rng.randint(0, 2, (B, C))), 2 * rng.normal(size=(B, C)), w_b)
    add("binlogit_r3", f(rng.randint(0, 2, (B, T, C))), 2 * rng.normal(size=(B, T, C)), w_bt)
    # hinge labels in {-1, 1}
    add("pm1_r2", f(2 * rng.randint(0, 2, (B, C)) - 1), rng.normal(size=(B, C)), w_b)
    # one-hot labels against (unnormalised) probabilities / logits; probability distributions
    eye = np.eye(C, dtype=np.float32)
    add("onehot_r2", eye[rng.randint(0, C, (B,))], rng.uniform(0.05, 1.0, (B, C)), w_b)
    add("onehot_r3", eye[rng.randint(0, C, (B, T))], rng.uniform(0.05, 1.0, (B, T, C)), w_bt)
    add("onehotlogit_r2", eye[rng.randint(0, C, (B,))], 2 * rng.normal(size=(B, C)), w_b)
    add("onehotlogit_r3", eye[rng.randint(0, C, (B, T))], 2 * rng.normal(size=(B, T, C)), w_bt)
    dist = lambda shape: (lambda a: a / a.sum(-1, keepdims=True))(rng.uniform(0.05, 1.0, shape))  # noqa: E731
    add("dist_r2", f(dist((B, C))), dist((B, C)), w_b)
    add("dist_r3", f(dist((B, T, C))), dist((B, T, C)), w_bt)
    # sparse integer labels
    add("sparse_r1", rng.randint(0, C, (B,)), rng.uniform(0.05, 1.0, (B, C)), w_b)
    add("sparse_col", rng.randint(0, C, (B, 1)), rng.uniform(0.05, 1.0, (B, C)), w_b)
    add("sparse_r2", rng.randint(0, C, (B, T)), rng.uniform(0.05, 1.0, (B, T, C)), w_bt)
    add("sparselogit_r1", rng.randint(0, C, (B,)), 2 * rng.normal(size=(B, C)), w_b)
    add("sparselogit_r2", rng.randint(0, C, (B, T)), 2 * rng.normal(size=(B, T, C)), w_bt)
    return out


INPUT_GROUPS = {
    "real": ["real_r1", "real_r2", "real_r3", "real_expand", "real_broadcast"],
    "pos": ["pos_r1", "pos_r2", "pos_r3"],
    "bin": ["bin_r1", "bin_r2", "bin_r3", "bin_expand"],
    "binlogit": ["binlogit_r1", "binlogit_r2", "binlogit_r3"],
    "hinge": ["bin_r2", "pm1_r2", "real_r2", "bin_r1"],
    "onehot": ["onehot_r2", "onehot_r3"],
    "onehotlogit": ["onehotlogit_r2", "onehotlogit_r3"],
    "dist": ["dist_r2", "dist_r3"],
    "sparse": ["sparse_r1", "sparse_col", "sparse_r2"],
    "sparselogit": ["sparselogit_r1", "sparselogit_r2"],
    "seg": ["bin_r2", "bin_r3", "bin_r1"],
}

#: (class name, constructor config, input group)
LOSS_CASES = [
    ("MeanSquaredError", {}, "real"),
    ("MeanAbsoluteError", {}, "real"),
    ("MeanAbsolutePercentageError", {}, "pos"),
    ("MeanSquaredLogarithmicError", {}, "pos"),
    ("Huber", {}, "real"),
    ("Huber", {"delta": 0.5}, "real"),
    ("LogCosh", {}, "real"),
    ("CosineSimilarity", {}, "real"),
    ("CosineSimilarity", {"axis": 1}, "real"),
    ("KLDivergence", {}, "dist"),
    ("Poisson", {}, "pos"),
    ("Hinge", {}, "hinge"),
    ("SquaredHinge", {}, "hinge"),
    ("CategoricalHinge", {}, "onehot"),
    ("BinaryCrossentropy", {}, "bin"),
    ("BinaryCrossentropy", {"label_smoothing": 0.2}, "bin"),
    ("BinaryCrossentropy", {"from_logits": True}, "binlogit"),
    ("BinaryCrossentropy", {"axis": 1}, "bin"),
    ("BinaryFocalCrossentropy", {}, "bin"),
    ("BinaryFocalCrossentropy", {"apply_class_balancing": True, "alpha": 0.3, "gamma": 1.5,
                                 "label_smoothing": 0.1}, "bin"),
    ("BinaryFocalCrossentropy", {"from_logits": True}, "binlogit"),
    ("CategoricalCrossentropy", {}, "onehot"),
    ("CategoricalCrossentropy", {"label_smoothing": 0.1}, "onehot"),
    ("CategoricalCrossentropy", {"from_logits": True}, "onehotlogit"),
    ("CategoricalCrossentropy", {"from_logits": True, "axis": 1}, "onehotlogit"),
    ("CategoricalFocalCrossentropy", {}, "onehot"),
    ("CategoricalFocalCrossentropy", {"alpha": 0.5, "gamma": 1.0, "label_smoothing": 0.1}, "onehot"),
    ("CategoricalFocalCrossentropy", {"from_logits": True}, "onehotlogit"),
    ("SparseCategoricalCrossentropy", {}, "sparse"),
    ("SparseCategoricalCrossentropy", {"from_logits": True}, "sparselogit"),
    ("SparseCategoricalCrossentropy", {"ignore_class": 1}, "sparse"),
    ("SparseCategoricalCrossentropy", {"from_logits": True, "ignore_class": 2}, "sparselogit"),
    ("Dice", {}, "seg"),
    ("Dice", {"axis": [1]}, "seg"),
    ("Tversky", {}, "seg"),
    ("Tversky", {"alpha": 0.7, "beta": 0.3}, "seg"),
]

#: (metric class, config, input names for the successive updates, use sample weights)
METRIC_CASES = [
    ("MeanSquaredError", {}, ["real_r2", "real_r3", "real_expand"], True),
    ("MeanAbsoluteError", {}, ["real_r2", "real_r3"], True),
    ("MeanAbsoluteError", {}, ["real_r2", "real_r1"], False),
    ("RootMeanSquaredError", {}, ["real_r2", "real_r3", "real_r1"], True),
    ("RootMeanSquaredError", {}, ["real_r2", "real_r1"], False),
    ("MeanAbsolutePercentageError", {}, ["pos_r2", "pos_r3"], True),
    ("MeanSquaredLogarithmicError", {}, ["pos_r2", "pos_r3"], True),
    ("LogCoshError", {}, ["real_r2", "real_r3"], True),
    ("CosineSimilarity", {}, ["real_r2", "real_r3"], True),
    ("KLDivergence", {}, ["dist_r2", "dist_r3"], True),
    ("Poisson", {}, ["pos_r2", "pos_r3"], True),
    ("Hinge", {}, ["bin_r2", "pm1_r2"], True),
    ("SquaredHinge", {}, ["bin_r2", "pm1_r2"], True),
    ("CategoricalHinge", {}, ["onehot_r2", "onehot_r3"], True),
    ("BinaryCrossentropy", {}, ["bin_r2", "bin_r3"], True),
    ("BinaryCrossentropy", {"from_logits": True, "label_smoothing": 0.1}, ["binlogit_r2", "binlogit_r3"], True),
    ("CategoricalCrossentropy", {}, ["onehot_r2", "onehot_r3"], True),
    ("CategoricalCrossentropy", {"from_logits": True, "label_smoothing": 0.2}, ["onehotlogit_r2"], True),
    ("SparseCategoricalCrossentropy", {}, ["sparse_r1", "sparse_col", "sparse_r2"], True),
    ("SparseCategoricalCrossentropy", {"from_logits": True}, ["sparselogit_r1", "sparselogit_r2"], True),
    ("SparseTopKCategoricalAccuracy", {"k": 2}, ["sparse_r1", "sparse_col", "sparse_r2"], True),
    ("SparseTopKCategoricalAccuracy", {"k": 1}, ["sparse_r1", "sparse_r2"], False),
    ("TopKCategoricalAccuracy", {"k": 2}, ["onehot_r2", "onehot_r3"], True),
    ("BinaryAccuracy", {"threshold": 0.3}, ["bin_r2", "bin_r3", "bin_r1"], True),
    ("CategoricalAccuracy", {}, ["onehot_r2", "onehot_r3"], True),
    ("SparseCategoricalAccuracy", {}, ["sparse_r1", "sparse_col", "sparse_r2"], True),
    ("Accuracy", {}, ["sparse_int_a", "sparse_int_b"], True),
    ("TruePositives", {}, ["bin_r2", "bin_r1"], True),
    ("TruePositives", {"thresholds": [0.2, 0.5, 0.8]}, ["bin_r2", "bin_r3"], True),
    ("TrueNegatives", {"thresholds": [0.3, 0.6]}, ["bin_r2", "bin_r1"], True),
    ("FalsePositives", {"thresholds": 0.4}, ["bin_r2", "bin_r3"], True),
    ("FalseNegatives", {}, ["bin_r2", "bin_r1"], True),
    ("Precision", {"thresholds": [0.3, 0.7]}, ["bin_r2", "bin_r3"], True),
    ("Recall", {"top_k": 2}, ["bin_r2", "bin_r2"], True),
    ("PrecisionAtRecall", {"recall": 0.5}, ["bin_r2", "bin_r3"], True),
    ("PrecisionAtRecall", {"recall": 0.8, "num_thresholds": 50}, ["bin_r2", "bin_r1"], False),
    ("RecallAtPrecision", {"precision": 0.6}, ["bin_r2", "bin_r3"], True),
    ("SensitivityAtSpecificity", {"specificity": 0.5}, ["bin_r2", "bin_r3"], True),
    ("SpecificityAtSensitivity", {"sensitivity": 0.5}, ["bin_r2", "bin_r3"], True),
    ("SpecificityAtSensitivity", {"sensitivity": 0.7, "class_id": 1}, ["bin_r2", "bin_r2"], True),
    ("AUC", {}, ["bin_r2", "bin_r3"], True),
    ("AUC", {"curve": "PR"}, ["bin_r2", "bin_r3"], True),
    ("AUC", {"summation_method": "minoring", "num_thresholds": 20}, ["bin_r2", "bin_r1"], True),
    ("AUC", {"curve": "PR", "summation_method": "majoring"}, ["bin_r2"], True),
    ("AUC", {"multi_label": True}, ["bin_r2", "bin_r2"], True),
    ("AUC", {"multi_label": True, "curve": "PR"}, ["bin_r2"], True),
    ("AUC", {"multi_label": True, "num_labels": 4, "summation_method": "majoring"}, ["bin_r2"], False),
    ("AUC", {"from_logits": True, "multi_label": True}, ["binlogit_r2"], True),
    ("F1Score", {}, ["bin_r2", "bin_r2"], True),
    ("F1Score", {"average": "macro", "threshold": 0.5}, ["bin_r2", "bin_r2"], True),
    ("F1Score", {"average": "micro", "threshold": 0.4}, ["bin_r2"], True),
    ("F1Score", {"average": "weighted", "threshold": 0.5}, ["bin_r2"], True),
    ("F1Score", {"average": "macro"}, ["onehot_r2"], False),
    ("FBetaScore", {"beta": 2.0, "threshold": 0.5}, ["bin_r2", "bin_r2"], True),
    ("FBetaScore", {"beta": 0.5, "average": "macro", "threshold": 0.6}, ["bin_r2"], False),
    ("MeanIoU", {"num_classes": 4}, ["sparse_int_a", "sparse_int_b"], True),
    ("MeanIoU", {"num_classes": 4, "ignore_class": 0, "sparse_y_pred": False}, ["sparse_r1", "sparse_r1"], True),
    ("IoU", {"num_classes": 4, "target_class_ids": [0, 2]}, ["sparse_int_a", "sparse_int_b"], True),
    ("BinaryIoU", {}, ["bin_r2", "bin_r1"], False),
    ("BinaryIoU", {"target_class_ids": [1], "threshold": 0.3}, ["bin_r2"], False),
    ("OneHotIoU", {"num_classes": 4, "target_class_ids": [1, 3]}, ["onehot_r2"], True),
    ("OneHotMeanIoU", {"num_classes": 4}, ["onehot_r2"], True),
    ("R2Score", {}, ["real_r2", "real_r2"], True),
    ("R2Score", {"class_aggregation": "variance_weighted_average"}, ["real_r2"], True),
    ("R2Score", {"class_aggregation": None}, ["real_r2"], False),
    ("R2Score", {"num_regressors": 1}, ["real_r2"], False),
]


def _extra_inputs(inputs):
    rng = np.random.RandomState(5)
    for name in ("sparse_int_a", "sparse_int_b"):
        inputs[name] = {"y_true": rng.randint(0, C, (B,)).tolist(), "y_pred": rng.randint(0, C, (B,)).tolist(),
                        "sample_weight": rng.uniform(0.0, 2.0, (B,)).astype(np.float32).tolist()}


def _plain(value):
    return np.asarray(value, dtype=np.float64).tolist()


def _loss_cases(keras, inputs):
    cases = []
    for cls_name, config, group in LOSS_CASES:
        for input_name in INPUT_GROUPS[group]:
            data = inputs[input_name]
            y_true = np.asarray(data["y_true"], dtype=np.float32)
            y_pred = np.asarray(data["y_pred"], dtype=np.float32)
            for reduction in REDUCTIONS:
                for weighted in (False, True):
                    case = {"loss": cls_name, "config": config, "input": input_name, "reduction": reduction,
                            "weighted": weighted}
                    loss = getattr(keras.losses, cls_name)(reduction=reduction, **config)
                    sw = np.asarray(data["sample_weight"], dtype=np.float32) if weighted else None
                    try:
                        case["result"] = _plain(loss(y_true, y_pred, sample_weight=sw))
                    except Exception as err:  # noqa: BLE001 - recorded as Keras's behaviour
                        case["error"] = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                    cases.append(case)
    return cases


def _metric_cases(keras, inputs):
    cases = []
    for cls_name, config, updates, weighted in METRIC_CASES:
        metric = getattr(keras.metrics, cls_name)(**config)
        results = []
        error = None
        for input_name in updates:
            data = inputs[input_name]
            y_true = np.asarray(data["y_true"], dtype=np.float32)
            y_pred = np.asarray(data["y_pred"], dtype=np.float32)
            sw = np.asarray(data["sample_weight"], dtype=np.float32) if weighted else None
            try:
                metric.update_state(y_true, y_pred, sample_weight=sw)
                results.append(_plain(metric.result()))
            except Exception as err:  # noqa: BLE001
                error = f"{type(err).__name__}: {str(err).splitlines()[0][:200]}"
                break
        case = {"metric": cls_name, "config": config, "updates": updates, "weighted": weighted,
                "results": results}
        if error:
            case["error"] = error
        cases.append(case)
    return cases


def _ps_tutorial(keras):
    rng = np.random.RandomState(7)
    y = rng.uniform(size=(64,)).astype(np.float32)
    p = rng.normal(size=(64, 10)).astype(np.float32)
    out = {"y_true": y.tolist(), "y_pred": p.tolist()}
    try:
        keras.losses.MeanSquaredError()(y, p)
        out["keras3_error"] = None
    except Exception as err:  # noqa: BLE001
        out["keras3_error"] = type(err).__name__
    out["expanded_mse"] = float(keras.losses.MeanSquaredError()(y[:, None], p))
    return out


def main():
    import tensorflow as tf

    tf.config.threading.set_inter_op_parallelism_threads(1)
    tf.config.threading.set_intra_op_parallelism_threads(1)
    keras = tf.keras
    inputs = _inputs()
    _extra_inputs(inputs)
    doc = {"tensorflow": tf.__version__, "keras": keras.__version__, "inputs": inputs,
           "losses": _loss_cases(keras, inputs), "metrics": _metric_cases(keras, inputs),
           "ps_tutorial": _ps_tutorial(keras)}
    OUT.parent.mkdir(parents=True, exist_ok=True)
    OUT.write_text(json.dumps(doc, separators=(",", ":")))
    errors = sum("error" in c for c in doc["losses"]) + sum("error" in c for c in doc["metrics"])
    print(f"wrote {OUT} ({len(doc['losses'])} loss cases, {len(doc['metrics'])} metric cases, {errors} errors)")


if __name__ == "__main__":
    main()
