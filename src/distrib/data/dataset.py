"""`Dataset`: tf.data's chainable input pipeline, yielding torch tensors.

The pipeline of TensorFlow's multi-worker Keras tutorial ports line for line::

    dataset = Dataset.from_tensor_slices((x_train, y_train)).shuffle(60000).repeat().batch(128)

In-memory pipelines are planned as index arrays: shuffling 60,000 examples
permutes 60,000 integers, and each batch is gathered with one
``index_select`` per tensor when it is needed (see `distrib.data.blocks`).

Semantics follow tf.data: ``shuffle`` draws from a buffer of ``buffer_size``
elements and reshuffles on every pass unless ``reshuffle_each_iteration=False``;
``repeat()`` restarts its input (reshuffling it); ``batch`` keeps a final
partial batch unless ``drop_remainder``; ``shard(n, i)`` keeps elements
``i, i+n, ...``; ``cardinality()`` returns a count, `INFINITE` or `UNKNOWN`.
Map and filter functions receive tuple components as separate arguments.
Elements are torch tensors mirroring the input's structure; numpy arrays
keep their dtype. Elements read from in-memory sources may share memory
with the source: do not modify them in place.

Example:
    >>> ds = Dataset.range(10).shuffle(10, seed=1).batch(4)
    >>> [b.shape[0] for b in ds], ds.cardinality()
    ([4, 4, 2], 3)
    >>> it = iter(ds); _ = next(it); state = it.state_dict()
    >>> it2 = iter(ds); it2.load_state_dict(state)
    >>> torch.equal(next(it), next(it2))
    True
"""
from __future__ import annotations

from typing import Any, Callable, Iterator, Optional, Sequence, Tuple, Union

from distrib.data.dataset_ops import DatasetOps
from distrib.data.operator_table import operator
from distrib.data.options import INFINITE, UNKNOWN, Options
from distrib.data.stream import BlockIterator, IterContext

__all__ = ["Dataset"]


class Dataset(DatasetOps):
    """A pipeline of elements (structures of torch tensors). Build it with the static constructors."""

    _inputs: Tuple["Dataset", ...] = ()

    # ---------------------------------------------------------- node protocol
    def _iterator(self, ctx: IterContext, lineage: Tuple[int, ...],
                  state: Optional[dict]) -> BlockIterator:
        """This operator's block iterator, fresh (``state=None``) or rebuilt from ``state``."""
        raise NotImplementedError

    def _cardinality(self) -> int:
        return UNKNOWN

    def _static_spec(self) -> Any:
        """The element spec, or None when only reading an element of this dataset tells it.

        Operators may ask their input's ``element_spec`` (which may read it).
        """
        return None

    def _own_options(self) -> Optional[Options]:
        return None

    def _with_inputs(self, inputs: Sequence["Dataset"]) -> "Dataset":
        """A shallow copy of this operator reading from ``inputs`` (used by auto-sharding)."""
        import copy

        clone = copy.copy(self)
        clone._inputs = tuple(inputs)
        if hasattr(clone, "_input"):
            clone._input = clone._inputs[0]
        clone.__dict__.pop("_ctx", None)
        for cached in ("_spec_cache", "_input_spec_cache", "_ragged_cache"):
            clone.__dict__.pop(cached, None)
        return clone

    # ----------------------------------------------------------- constructors
    @staticmethod
    def from_tensor_slices(tensors: Any) -> "Dataset":
        """One element per row of ``tensors`` (a tensor, array, or tuple/dict of them)."""
        return operator("TensorSlicesDataset")(tensors)

    @staticmethod
    def from_tensors(tensors: Any) -> "Dataset":
        """A single element: ``tensors`` itself."""
        return operator("TensorsDataset")(tensors)

    @staticmethod
    def range(*args: int, output_type: Any = None, dtype: Any = None) -> "Dataset":
        """``range(stop)``, ``range(start, stop)`` or ``range(start, stop, step)`` as int64 scalars.

        ``output_type`` (tf.data's name) or ``dtype`` picks another torch dtype.
        """
        return operator("RangeDataset")(*args, dtype=output_type if output_type is not None else dtype)

    @staticmethod
    def from_generator(generator: Callable[..., Any], output_types: Any = None, output_shapes: Any = None,
                       args: Optional[Sequence[Any]] = None, output_signature: Any = None,
                       name: Optional[str] = None) -> "Dataset":
        """Elements yielded by ``generator(*args)``, called anew on every pass.

        ``output_signature`` (a structure of `TensorSpec`) fixes dtypes and checks
        shapes; tf.data's older ``output_types`` / ``output_shapes`` do the same
        (types: torch/numpy dtypes, names like ``"int64"``, or ``"string"``).
        Restoring an iterator re-runs the generator and skips what was consumed,
        so the generator must be deterministic for exact resume.
        """
        from distrib.data.generators import signature_from_types
        from distrib.data.structure import TensorSpec, leaves

        if output_types is not None and output_signature is None and all(
                isinstance(x, TensorSpec) for x in leaves(output_types)):
            output_types, output_signature = None, output_types  # from_generator(gen, signature)
        if output_types is not None:
            if output_signature is not None:
                raise TypeError("from_generator: give output_signature or output_types, not both")
            output_signature = signature_from_types(output_types, output_shapes)
        elif output_shapes is not None:
            raise TypeError("from_generator: output_shapes needs output_types (or use output_signature)")
        return operator("GeneratorDataset")(generator, output_signature, tuple(args or ()))

    @staticmethod
    def zip(*datasets: Any, name: Optional[str] = None) -> "Dataset":
        """Elements of several datasets side by side, stopping at the shortest.

        ``Dataset.zip((a, b))`` (a tuple or dict of datasets, nesting allowed)
        or ``Dataset.zip(a, b)``; the element has the structure of the argument.
        """
        if len(datasets) == 1 and not isinstance(datasets[0], Dataset):
            return operator("zip_datasets")(datasets[0])
        if not datasets:
            raise TypeError("Dataset.zip needs datasets: Dataset.zip((a, b)) or Dataset.zip(a, b)")
        return operator("zip_datasets")(tuple(datasets))

    @staticmethod
    def list_files(file_pattern: Union[str, Sequence[str]], shuffle: Optional[bool] = None,
                   seed: Optional[int] = None, name: Optional[str] = None) -> "Dataset":
        """The paths matching a glob (or globs) as str elements; a file source for FILE sharding.

        Shuffled unless ``shuffle=False``, as in tf.data (see `distrib.data.readers.text`).
        """
        return operator("list_files")(file_pattern, shuffle, seed)

    @staticmethod
    def from_files(paths: Union[str, Sequence[str]], reader: Callable[[str], Any]) -> "Dataset":
        """The elements of several files, read one file after another by ``reader(path)``.

        ``reader`` returns tensors/arrays (one element per row), a `Dataset`, or
        any iterable of elements. ``paths`` is a list or a glob pattern (sorted).
        Under `AutoShardPolicy.FILE` (or AUTO) each worker reads only its files.
        """
        return operator("FilesDataset")(paths, reader)

    # ---------------------------------------------------------- transforms
    def map(self, map_func: Callable, num_parallel_calls: Optional[int] = None,
            deterministic: Optional[bool] = None, name: Optional[str] = None) -> "Dataset":
        """``map_func`` applied to every element (after ``batch`` it receives whole batches).

        ``num_parallel_calls`` (a count or `AUTOTUNE`) runs it on that many workers
        (threads, or processes with ``Options().threading.workers = "processes"``);
        the elements and their order are the serial map's unless
        ``deterministic=False`` (then they come as they finish). See
        `distrib.data.parallel.parallel_map`.
        """
        if num_parallel_calls is None:
            return operator("MapDataset")(self, map_func)
        return operator("ParallelMapDataset")(self, map_func, num_parallel_calls, deterministic)

    def filter(self, predicate: Callable, name: Optional[str] = None) -> "Dataset":
        """The elements for which ``predicate`` returns true (a bool or scalar bool tensor)."""
        return operator("FilterDataset")(self, predicate)

    def shuffle(self, buffer_size: int, seed: Optional[int] = None,
                reshuffle_each_iteration: bool = True, name: Optional[str] = None) -> "Dataset":
        """Randomly reorder elements, drawing each from a buffer of ``buffer_size``.

        ``buffer_size`` >= the dataset size gives a uniform permutation. Without a
        ``seed`` the order follows ``torch.manual_seed``; a distributed dataset
        makes it the same on every worker.
        """
        return operator("ShuffleDataset")(self, buffer_size, seed, reshuffle_each_iteration)

    def repeat(self, count: Optional[int] = None, name: Optional[str] = None) -> "Dataset":
        """The dataset ``count`` times (forever when None or -1)."""
        return operator("RepeatDataset")(self, count)

    def batch(self, batch_size: int, drop_remainder: bool = False,
              num_parallel_calls: Optional[int] = None, deterministic: Optional[bool] = None,
              name: Optional[str] = None) -> "Dataset":
        """Consecutive elements stacked into batches of ``batch_size``.

        ``num_parallel_calls`` is accepted and batches are built on the calling thread
        (a ``prefetch`` after ``batch`` moves that to the background).
        """
        return operator("BatchDataset")(self, batch_size, drop_remainder)

    def unbatch(self, name: Optional[str] = None) -> "Dataset":
        """Split every batch back into its rows."""
        return operator("UnbatchDataset")(self)

    def shard(self, num_shards: int, index: int, name: Optional[str] = None) -> "Dataset":
        """Elements ``index, index + num_shards, ...`` (one worker's share)."""
        return operator("ShardDataset")(self, num_shards, index)

    def take(self, count: int, name: Optional[str] = None) -> "Dataset":
        """The first ``count`` elements (all when ``count`` is -1)."""
        return operator("TakeDataset")(self, count)

    def skip(self, count: int, name: Optional[str] = None) -> "Dataset":
        """All but the first ``count`` elements (none when ``count`` is -1)."""
        return operator("SkipDataset")(self, count)

    def prefetch(self, buffer_size: int, name: Optional[str] = None) -> "Dataset":
        """A background thread keeps up to ``buffer_size`` elements ready (`AUTOTUNE`: 2; 0: none).

        Same elements, same order, exact resume. Elements still planned as indices
        (in-memory rows and batches) are gathered by the consumer: that is cheaper
        than a hand-off. See `distrib.data.parallel.prefetch`.
        """
        return operator("PrefetchDataset")(self, buffer_size)

    def cache(self, filename: str = "", name: Optional[str] = None) -> "Dataset":
        """Remember the elements of the first complete pass and replay them afterwards.

        Like tf.data, a shuffle *before* ``cache()`` is frozen by it; put the
        shuffle after the cache to reshuffle every epoch. Without ``filename``
        the elements stay in memory; with it they go to
        ``<filename>.distrib-cache`` (one file per worker process under a
        strategy), published only when a pass completes and read by later
        passes and later runs (docs/input-pipelines.md, "Caching to a file").

        Example:
            >>> ds = Dataset.range(3).map(expensive).cache("/tmp/feats")
            >>> first = list(ds)    # runs ``expensive``, writes /tmp/feats.distrib-cache
            >>> again = list(ds)    # reads the file
        """
        return operator("CacheDataset")(self, filename)

    def with_options(self, options: Options, name: Optional[str] = None) -> "Dataset":
        """This dataset with ``options`` (e.g. the auto-shard policy) attached."""
        return operator("OptionsDataset")(self, options)

    def enumerate(self, start: int = 0, name: Optional[str] = None) -> "Dataset":
        """``(index, element)`` pairs, the index an int64 scalar counting from ``start``."""
        return operator("EnumerateDataset")(self, start)

    def concatenate(self, dataset: "Dataset", name: Optional[str] = None) -> "Dataset":
        """This dataset's elements, then ``dataset``'s (same structure)."""
        return operator("ConcatenateDataset")(self, dataset)

    def interleave(self, map_func: Callable[..., "Dataset"], cycle_length: Optional[int] = None,
                   block_length: Optional[int] = None, num_parallel_calls: Optional[int] = None,
                   deterministic: Optional[bool] = None, name: Optional[str] = None) -> "Dataset":
        """Elements of ``map_func(x)`` for each element ``x``, ``cycle_length`` datasets at a time.

        ``block_length`` consecutive elements come from each open dataset in turn
        (tf.data's order). With ``num_parallel_calls`` the open datasets are read
        ahead on that many threads, in the same order (``deterministic=False`` is
        accepted and keeps it). ``cycle_length`` defaults to the number of CPU cores, as in TF.

        Example:
            >>> [int(v) for v in Dataset.range(2).interleave(
            ...     lambda x: Dataset.range(3).map(lambda y: 10 * x + y), cycle_length=2, block_length=2)]
            [0, 1, 10, 11, 2, 12]
        """
        if num_parallel_calls is None:
            return operator("InterleaveDataset")(self, map_func, cycle_length, block_length)
        return operator("ParallelInterleaveDataset")(self, map_func, cycle_length, block_length, num_parallel_calls)

    def flat_map(self, map_func: Callable[..., "Dataset"], name: Optional[str] = None) -> "Dataset":
        """The elements of ``map_func(x)`` for each element ``x``, one dataset after another."""
        return operator("InterleaveDataset")(self, map_func, 1, 1, where="flat_map")

    def padded_batch(self, batch_size: int, padded_shapes: Any = None, padding_values: Any = None,
                     drop_remainder: bool = False, name: Optional[str] = None) -> "Dataset":
        """Batches of elements of different shapes, padded at the end of each dimension.

        ``padded_shapes`` (per component, ``None``/-1 = the batch's largest) and
        ``padding_values`` (default 0, ``""`` for strings) as in tf.data; see
        `distrib.data.transforms.padding`.
        """
        return operator("PaddedBatchDataset")(self, batch_size, padded_shapes, padding_values, drop_remainder)

    def apply(self, transformation_func: Callable[["Dataset"], "Dataset"]) -> "Dataset":
        """``transformation_func(self)``."""
        return transformation_func(self)

    # ----------------------------------------------------------- inspection
    def options(self) -> Options:
        """The options of the whole pipeline (later ``with_options`` win)."""
        from distrib.data.stream import walk

        found = [n._own_options() for n in walk(self)]
        merged = Options()
        for opts in reversed([o for o in found if o is not None]):
            merged = merged.merge(opts)
        return merged

    def cardinality(self) -> int:
        """The number of elements, or `INFINITE` (-1) or `UNKNOWN` (-2)."""
        return self._cardinality()

    def __bool__(self) -> bool:
        return True  # a dataset is truthy even when infinite or of unknown length

    def __len__(self) -> int:
        n = self._cardinality()
        if n == INFINITE:
            raise TypeError("the dataset is infinite (repeat() without a count): it has no length")
        if n == UNKNOWN:
            raise TypeError("the dataset's length is unknown (it uses filter(), a generator or files): "
                            "count it by iterating, or use take()")
        return n

    @property
    def element_spec(self) -> Any:
        """The `TensorSpec` structure of one element (read from the first element if need be)."""
        spec = self._static_spec()
        if spec is None:
            spec = self.__dict__.get("_spec_cache")
        if spec is None:
            spec = self._traced_spec()
            self.__dict__["_spec_cache"] = spec
        return spec

    def _traced_spec(self) -> Any:
        """The spec read from the first element (operators whose shapes vary say more: ``map``)."""
        from distrib.data.iterator import DatasetIterator
        from distrib.data.structure import spec_of

        first = next(DatasetIterator(self, IterContext(self)), None)
        if first is None:
            raise ValueError("the dataset is empty, so its element_spec is unknown")
        return spec_of(first)

    # -------------------------------------------------------------- iteration
    def _context(self) -> IterContext:
        ctx = self.__dict__.get("_ctx")
        if ctx is None:
            ctx = IterContext(self)
            self.__dict__["_ctx"] = ctx
        return ctx

    def __iter__(self) -> "Iterator[Any]":
        from distrib.data.iterator import DatasetIterator

        return DatasetIterator(self, self._context())

    def as_numpy_iterator(self) -> Iterator[Any]:
        """The elements with every tensor as a numpy array (a numpy scalar when 0-d), as in tf.data."""
        import torch

        from distrib.data.structure import map_leaves

        for element in self:
            yield map_leaves(lambda t: (t.numpy()[()] if t.dim() == 0 else t.numpy())
                             if isinstance(t, torch.Tensor) else t, element)

    def __repr__(self) -> str:
        card = self._cardinality()
        text = {INFINITE: "infinite", UNKNOWN: "unknown"}.get(card, str(card))
        return f"<{type(self).__name__} cardinality={text}>"

