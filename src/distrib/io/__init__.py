"""distrib.io: tf.io's counterparts, without TensorFlow.

TFRecord files (`TFRecordWriter`, `tf_record_iterator`, read in pipelines by
`distrib.data.TFRecordDataset`), ``tf.train.Example`` messages and their
parsing (`parse_single_example`, `parse_example` with `FixedLenFeature`,
`VarLenFeature`, `FixedLenSequenceFeature`), and image files (`decode_jpeg`,
`decode_png`, `decode_image`, `encode_jpeg`, `encode_png`, `read_file`).
See docs/input-pipelines.md, "Files TensorFlow wrote".

Example:
    >>> with distrib.io.TFRecordWriter("train.tfrecord") as writer:
    ...     writer.write(distrib.io.Example(features=distrib.io.Features(feature={
    ...         "label": distrib.io.Feature(int64_list=distrib.io.Int64List(value=[1]))})).SerializeToString())
"""
from distrib.io.compression import TFRecordOptions
from distrib.io.dtypes import STRING
from distrib.io.errors import DataLossError
from distrib.io.example_proto import (BytesList, Example, Feature, FeatureList, FeatureLists, Features, FloatList,
                                      Int64List, SequenceExample)
from distrib.io.features import FixedLenFeature, FixedLenSequenceFeature, SparseTensor, VarLenFeature
from distrib.io.images import (decode_bmp, decode_gif, decode_image, decode_jpeg, decode_png, encode_jpeg,
                               encode_png, is_jpeg, read_file, write_file)
from distrib.io.parsing import parse_example, parse_single_example
from distrib.io.records import TFRecordWriter, tf_record_iterator

__all__ = ["TFRecordWriter", "TFRecordOptions", "tf_record_iterator", "DataLossError", "STRING",
           "Example", "SequenceExample", "Features", "Feature", "FeatureList", "FeatureLists", "BytesList",
           "FloatList", "Int64List", "FixedLenFeature", "VarLenFeature", "FixedLenSequenceFeature",
           "SparseTensor", "parse_single_example", "parse_example", "read_file", "write_file", "decode_jpeg",
           "decode_png", "decode_gif", "decode_bmp", "decode_image", "encode_jpeg", "encode_png", "is_jpeg"]
