"""The loss, metric and optimizer registries share one serializer (`distrib.utils.registry.ClassRegistry`)."""
from __future__ import annotations

import json

import pytest

from distrib.losses import registry as losses
from distrib.metrics import registry as metrics
from distrib.optimizers import registry as optimizers
from distrib.utils.registry import ClassRegistry


@pytest.mark.parametrize("registry, kind, obj", [
    (losses, "loss", losses.get("huber")),
    (metrics, "metric", metrics.get("auc")),
    (optimizers, "optimizer", optimizers.get("adam")),
])
def test_each_registry_serialises_through_one_class_registry(registry, kind, obj):
    assert isinstance(registry._REGISTRY, ClassRegistry) and registry._REGISTRY.classes is registry.CLASSES
    spec = registry.serialize(obj)
    assert sorted(spec) == ["class_name", "config"] and spec["class_name"] == type(obj).__name__
    again = registry.deserialize(json.loads(json.dumps(spec)))  # the JSON format round-trips
    assert type(again) is type(obj) and again.get_config() == obj.get_config()
    with pytest.raises(ValueError, match=f"cannot deserialise {kind} class 'os.system'; known classes are"):
        registry.deserialize({"class_name": "os.system"})
    with pytest.raises(ValueError, match=f"is not a built-in distrib {kind} and cannot be serialised"):
        registry.serialize(object())


def test_a_class_added_to_the_table_later_is_accepted():
    table = {}
    registry = ClassRegistry("thing", table)

    class Thing:
        def __init__(self, size=1):
            self.size = size

        def get_config(self):
            return {"size": self.size}

        @classmethod
        def from_config(cls, config):
            return cls(**config)

    table["Thing"] = Thing
    assert registry.deserialize(registry.serialize(Thing(3))).size == 3
