"""distrib.data: tf.data's input pipeline on torch tensors, and its distribution.

Example (the pipeline of TensorFlow's multi-worker Keras tutorial, ported line for line):
    >>> from distrib.data import Dataset
    >>> dataset = Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat().batch(128)
    >>> dist = strategy.experimental_distribute_dataset(dataset)   # each replica: 128 / N examples
"""
from distrib.data import catalog, experimental  # catalog: binds the operators Dataset's methods create
from distrib.data.dataset import Dataset
from distrib.data.distribution.adapters import as_dataset
from distrib.data.distribution.distributed import DistributedDataset
from distrib.data.distribution.distributed_iterator import DistributedIterator
from distrib.data.distribution.input_context import InputBinding, InputContext, InputHost, InputPlacement
from distrib.data.iterator import DatasetIterator, Optional, OutOfRangeError
from distrib.data.options import (AUTOTUNE, INFINITE, INFINITE_CARDINALITY, UNKNOWN,
                                  UNKNOWN_CARDINALITY, AutoShardPolicy, DistributeOptions, Options,
                                  ThreadingOptions)
from distrib.data.strings import STRING
from distrib.data.structure import TensorSpec
from distrib.data.readers import TFRecordDataset
from distrib.data.readers.text import TextLineDataset
from distrib.data.transforms.element_state import DatasetSpec
from distrib.data.transforms.windowing import RaggedList, RaggedSpec

__all__ = ["Dataset", "as_dataset", "Options", "DistributeOptions", "ThreadingOptions", "AutoShardPolicy",
           "InputContext", "InputPlacement", "InputHost", "InputBinding", "TensorSpec", "DatasetIterator", "DistributedDataset",
           "DistributedIterator", "Optional", "OutOfRangeError", "AUTOTUNE", "INFINITE", "UNKNOWN",
           "INFINITE_CARDINALITY", "UNKNOWN_CARDINALITY", "experimental", "TextLineDataset", "TFRecordDataset", "STRING",
           "DatasetSpec", "RaggedList", "RaggedSpec"]
