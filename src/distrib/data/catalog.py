"""The implementations of `Dataset`'s methods, bound once into `distrib.data.operator_table`.

Imported by the package (``import distrib.data``), so every pipeline can be
built as soon as any ``distrib.data`` module is imported. Each name below is
the one a method passes to `distrib.data.operator_table.operator`.
"""
from __future__ import annotations

from distrib.data.transforms.batching import BatchDataset, UnbatchDataset
from distrib.data.transforms.cache import CacheDataset
from distrib.data.transforms.choosing import CounterDataset, choose_from_datasets, sample_from_datasets
from distrib.data.transforms.combinators import ConcatenateDataset, EnumerateDataset, InterleaveDataset, zip_datasets
from distrib.data.transforms.folds import ScanDataset, TakeWhileDataset, UniqueDataset, reduce_dataset, single_element
from distrib.data.transforms.grouping import GroupByWindowDataset, bucket_by_sequence_length
from distrib.data.operator_table import bind
from distrib.data.transforms.padding import PaddedBatchDataset
from distrib.data.transforms.shuffle import ShuffleDataset
from distrib.data.sources.in_memory import FilesDataset, GeneratorDataset, RangeDataset, TensorsDataset, TensorSlicesDataset
from distrib.data.readers.text import list_files
from distrib.data.parallel.parallel_interleave import ParallelInterleaveDataset
from distrib.data.parallel.parallel_map import ParallelMapDataset
from distrib.data.parallel.prefetch import PrefetchDataset
from distrib.data.transforms.elementwise import (FilterDataset, MapDataset, OptionsDataset, RepeatDataset, ShardDataset,
                                     SkipDataset, TakeDataset)
from distrib.data.transforms.windowing import RaggedBatchDataset, RebatchDataset, WindowDataset

__all__: list = []

bind([
    # sources (Dataset's static constructors)
    TensorSlicesDataset, TensorsDataset, RangeDataset, GeneratorDataset, FilesDataset, list_files, zip_datasets,
    # transforms
    MapDataset, FilterDataset, ShuffleDataset, RepeatDataset, BatchDataset, UnbatchDataset, ShardDataset,
    TakeDataset, SkipDataset, PrefetchDataset, CacheDataset, OptionsDataset, EnumerateDataset,
    ConcatenateDataset, InterleaveDataset, PaddedBatchDataset,
    # the parallel executor (`distrib.data.parallel`)
    ParallelMapDataset, ParallelInterleaveDataset,
    # windowing, folds, grouping, choosing (`distrib.data.dataset_ops`)
    WindowDataset, RebatchDataset, RaggedBatchDataset, ScanDataset, UniqueDataset, TakeWhileDataset,
    reduce_dataset, single_element, GroupByWindowDataset, bucket_by_sequence_length, choose_from_datasets,
    sample_from_datasets, CounterDataset,
])
