"""File readers, the sources wing of `distrib.data`: datasets whose elements come from files.

Each reader is a file source (`distrib.data.sources.in_memory.FilesDataset`), so
``AutoShardPolicy.FILE``/``AUTO`` gives every worker its own files.
"""
from distrib.data.readers.tfrecord import TFRecordDataset

__all__ = ["TFRecordDataset"]
