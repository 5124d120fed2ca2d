"""``tf.train.Example`` and its parts as protobuf messages, without TensorFlow.

The classes are built when this module is imported, from a descriptor of
TensorFlow's public schema (``tensorflow/core/example/feature.proto`` and
``example.proto``, package ``tensorflow``) held in a private descriptor pool,
so they parse and write the bytes TF's own classes do and never clash with
TF's classes if both are loaded. See docs/input-pipelines.md.

Example:
    >>> ex = Example(features=Features(feature={"y": Feature(int64_list=Int64List(value=[3]))}))
    >>> Example.FromString(ex.SerializeToString()).features.feature["y"].int64_list.value[0]
    3
"""
from __future__ import annotations

from typing import Any

from google.protobuf import descriptor_pb2, descriptor_pool, message_factory

__all__ = ["BytesList", "FloatList", "Int64List", "Feature", "Features", "FeatureList", "FeatureLists",
           "Example", "SequenceExample"]

_F = descriptor_pb2.FieldDescriptorProto


def _message(file: Any, name: str, fields: list, oneof: str = "") -> Any:
    message = file.message_type.add(name=name)
    if oneof:
        message.oneof_decl.add(name=oneof)
    for number, field_name, kind, label, type_name, packed in fields:
        field = message.field.add(name=field_name, number=number, type=kind, label=label)
        if type_name:
            field.type_name = type_name
        if packed:
            field.options.packed = True
        if oneof:
            field.oneof_index = 0
    return message


def _map(message: Any, field_name: str, entry: str, value_type: str) -> None:
    nested = message.nested_type.add(name=entry)
    nested.options.map_entry = True
    nested.field.add(name="key", number=1, type=_F.TYPE_STRING, label=_F.LABEL_OPTIONAL)
    nested.field.add(name="value", number=2, type=_F.TYPE_MESSAGE, label=_F.LABEL_OPTIONAL, type_name=value_type)
    message.field.add(name=field_name, number=1, type=_F.TYPE_MESSAGE, label=_F.LABEL_REPEATED,
                      type_name=f".tensorflow.{message.name}.{entry}")


def _files() -> list:
    rep, opt = _F.LABEL_REPEATED, _F.LABEL_OPTIONAL
    feature = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/feature.proto",
                                                 package="tensorflow", syntax="proto3")
    _message(feature, "BytesList", [(1, "value", _F.TYPE_BYTES, rep, "", False)])
    _message(feature, "FloatList", [(1, "value", _F.TYPE_FLOAT, rep, "", True)])
    _message(feature, "Int64List", [(1, "value", _F.TYPE_INT64, rep, "", True)])
    _message(feature, "Feature", [(1, "bytes_list", _F.TYPE_MESSAGE, opt, ".tensorflow.BytesList", False),
                                  (2, "float_list", _F.TYPE_MESSAGE, opt, ".tensorflow.FloatList", False),
                                  (3, "int64_list", _F.TYPE_MESSAGE, opt, ".tensorflow.Int64List", False)],
             oneof="kind")
    _map(feature.message_type.add(name="Features"), "feature", "FeatureEntry", ".tensorflow.Feature")
    _message(feature, "FeatureList", [(1, "feature", _F.TYPE_MESSAGE, rep, ".tensorflow.Feature", False)])
    _map(feature.message_type.add(name="FeatureLists"), "feature_list", "FeatureListEntry",
         ".tensorflow.FeatureList")
    example = descriptor_pb2.FileDescriptorProto(name="tensorflow/core/example/example.proto",
                                                 package="tensorflow", syntax="proto3",
                                                 dependency=["tensorflow/core/example/feature.proto"])
    _message(example, "Example", [(1, "features", _F.TYPE_MESSAGE, opt, ".tensorflow.Features", False)])
    _message(example, "SequenceExample", [
        (1, "context", _F.TYPE_MESSAGE, opt, ".tensorflow.Features", False),
        (2, "feature_lists", _F.TYPE_MESSAGE, opt, ".tensorflow.FeatureLists", False)])
    return [feature, example]


def _classes() -> dict:
    pool = descriptor_pool.DescriptorPool()
    for file in _files():
        pool.Add(file)
    return {name: message_factory.GetMessageClass(pool.FindMessageTypeByName(f"tensorflow.{name}"))
            for name in __all__}


_CLASSES = _classes()
for _cls in _CLASSES.values():
    _cls.__module__ = __name__  # where the reference documents them

BytesList = _CLASSES["BytesList"]
"""``tf.train.BytesList``: ``value``, a list of ``bytes``."""

FloatList = _CLASSES["FloatList"]
"""``tf.train.FloatList``: ``value``, a list of float32 numbers."""

Int64List = _CLASSES["Int64List"]
"""``tf.train.Int64List``: ``value``, a list of int64 numbers."""

Feature = _CLASSES["Feature"]
"""``tf.train.Feature``: one of ``bytes_list``, ``float_list``, ``int64_list``."""

Features = _CLASSES["Features"]
"""``tf.train.Features``: ``feature``, a map of name -> `Feature`."""

FeatureList = _CLASSES["FeatureList"]
"""``tf.train.FeatureList``: ``feature``, a list of `Feature`."""

FeatureLists = _CLASSES["FeatureLists"]
"""``tf.train.FeatureLists``: ``feature_list``, a map of name -> `FeatureList`."""

Example = _CLASSES["Example"]
"""``tf.train.Example``: ``features`` (a `Features`); ``SerializeToString()``, ``FromString(b)``."""

SequenceExample = _CLASSES["SequenceExample"]
"""``tf.train.SequenceExample``: ``context`` (`Features`) and ``feature_lists`` (`FeatureLists`)."""
