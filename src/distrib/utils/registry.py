"""`ClassRegistry`: built-in classes by name, to and from ``{"class_name": ..., "config": {...}}``.

The one serializer of the loss, metric and optimizer registries
(`distrib.losses.registry`, `distrib.metrics.registry`,
`distrib.optimizers.registry`): an object is written as its class name and
its ``get_config()``, and read back with ``from_config`` -- only for a class
in the table, never an arbitrary import. Each registry keeps its public
``serialize``/``deserialize`` functions; they are this class's methods.

Example:
    >>> LOSSES = ClassRegistry("loss", {"MeanSquaredError": MeanSquaredError})
    >>> LOSSES.serialize(MeanSquaredError())
    {'class_name': 'MeanSquaredError', 'config': {'reduction': 'auto', 'name': 'mean_squared_error'}}
    >>> LOSSES.deserialize({"class_name": "os.system"})
    Traceback (most recent call last):
    ValueError: cannot deserialise loss class 'os.system'; known classes are ['MeanSquaredError']
"""
from __future__ import annotations

from typing import Any, Dict, Mapping

__all__ = ["ClassRegistry"]


class ClassRegistry:
    """Serialise instances of the classes in ``classes`` (by class name) and rebuild them.

    Args:
        kind: what the classes are, in error messages (``"loss"``, ``"metric"``, ``"optimizer"``).
        classes: class name -> class; kept by reference, so a class added to the
            table later is accepted too.
    """

    def __init__(self, kind: str, classes: Mapping[str, type]) -> None:
        self.kind = kind
        self.classes = classes

    def serialize(self, obj: Any) -> Dict[str, Any]:
        """``{"class_name": ..., "config": {...}}`` for an instance of a listed class (JSON-serialisable)."""
        name = type(obj).__name__
        if name not in self.classes:
            raise ValueError(f"{self.kind} {obj!r} is not a built-in distrib {self.kind} and cannot be serialised")
        return {"class_name": name, "config": obj.get_config()}

    def deserialize(self, config: Dict[str, Any]) -> Any:
        """The object `serialize` described; only listed classes are accepted."""
        name = config.get("class_name")
        if name not in self.classes:
            raise ValueError(f"cannot deserialise {self.kind} class {name!r}; "
                             f"known classes are {sorted(self.classes)}")
        return self.classes[name].from_config(dict(config.get("config", {})))

    def __repr__(self) -> str:
        return f"ClassRegistry({self.kind!r}, {len(self.classes)} classes)"
