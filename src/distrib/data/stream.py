"""The machinery under every dataset iterator: block streams, seeds and lineage.

Each dataset operator makes a `BlockIterator` that hands out `Block` s of at
most ``limit`` elements. Every iterator can describe its position as a small
JSON-able dict (`state`) and be rebuilt from it, which is what makes
iterators checkpointable.

Randomness is reproducible by construction: a shuffle's order depends only
on its seed and its *lineage*, the tuple of iteration numbers that led to it
(which pass over the dataset, which repetition of an enclosing ``repeat``).
Rebuilding an iterator from its state therefore replays exactly the same
orders, on any process.

Example (lineage): in ``Dataset.range(4).shuffle(4).repeat(2)`` iterated for
the third time, the shuffle runs with lineage ``(2, 0)`` then ``(2, 1)``.
"""
from __future__ import annotations

from typing import Any, Dict, Iterator, List, Optional, Tuple

import torch

from distrib.data.blocks import Block
from distrib.data.seed_mixing import mix_seed

__all__ = ["ALL", "BlockIterator", "IterContext", "default_seed", "walk", "pull"]

#: ``limit`` meaning "as many as you have".
ALL = 1 << 62

Lineage = Tuple[int, ...]


class BlockIterator:
    """One operator's position in its stream."""

    def next_block(self, limit: int) -> Optional[Block]:
        """Up to ``limit`` (>= 1) next elements as one block, or None at the end."""
        raise NotImplementedError

    def state(self) -> Dict[str, Any]:
        """A JSON-able snapshot of the position (a fresh dict every call)."""
        raise NotImplementedError

    def batched_by(self, size: int) -> None:
        """A hint from the consumer: it stacks this stream's elements ``size`` at a time, from the first.

        An iterator that places its results in memory it lends may lay them out as rows of such a
        batch (worker processes of a parallel ``map`` do); the others ignore it.
        """


def pull(it: BlockIterator, n: int) -> List[Block]:
    """Up to ``n`` elements as a list of blocks (fewer only at the end of the stream)."""
    out: List[Block] = []
    have = 0
    while have < n:
        block = it.next_block(n - have)
        if block is None:
            break
        out.append(block)
        have += len(block)
    return out


def default_seed() -> int:
    """The seed of an unseeded random op, drawn from torch's global generator.

    PyTorch's own convention (a ``RandomSampler`` without a generator does the
    same), and the counterpart of tf.data's global seed: ``torch.manual_seed(s)``
    before building a pipeline makes its unseeded shuffles reproducible.
    """
    return int(torch.empty((), dtype=torch.int64).random_().item()) & ((1 << 62) - 1)


def walk(root: Any) -> Iterator[Any]:
    """Every dataset node of a pipeline, root first (pre-order, inputs left to right)."""
    stack = [root]
    while stack:
        node = stack.pop()
        yield node
        stack.extend(reversed(getattr(node, "_inputs", ())))


class IterContext:
    """What the iterators of one consumer of a pipeline share.

    A consumer is a plain `Dataset` being iterated, or one distributed dataset.
    It numbers the passes over the dataset, may override unseeded seeds (a
    distributed dataset sets ``base_seed`` to one agreed by all workers), and
    holds ``cache()`` contents.

    Args:
        root: the pipeline's last dataset.
        base_seed: when set, unseeded random ops derive their seed from it and
            their position in the pipeline instead of using their own.
    """

    def __init__(self, root: Any, base_seed: Optional[int] = None) -> None:
        self.base_seed = base_seed
        self._root = root
        self._options: Any = None
        #: ``(num_replicas, replica)`` when a distributed dataset (DATA sharding) will gather
        #: only slice ``replica`` of each batch (`distrib.data.batch_split.split_bounds`); else None.
        self.replica_slice: Optional[Tuple[int, int]] = None
        self._index = {id(node): i for i, node in enumerate(walk(root))}
        self._iterations = 0
        self.seeds: Dict[int, int] = {}
        self.caches: Dict[int, List[Block]] = {}
        self.cache_sources: Dict[int, Dict[str, Any]] = {}
        #: Added to ``cache(filename)`` names so that each process has its own file
        #: (`distrib.data.caching.cache_file.worker_suffix`; "" outside a distributed dataset).
        self.cache_suffix = ""

    def options(self) -> Any:
        """The pipeline's merged `distrib.data.Options` (read once)."""
        if self._options is None:
            self._options = self._root.options()
        return self._options

    def index(self, node: Any) -> int:
        """The node's position in the pipeline (stable across processes)."""
        return self._index[id(node)]

    def seed(self, node: Any, own_seed: int, given: bool) -> int:
        """The seed a random op uses: its own if the user gave one, else the consumer's.

        Seeds are part of `state`, so a restored consumer keeps the original
        ones even if unseeded ops would draw differently in the new process.
        """
        k = self.index(node)
        seed = self.seeds.get(k)
        if seed is None:
            seed = own_seed if given or self.base_seed is None else mix_seed(self.base_seed, k)
            self.seeds[k] = seed
        return seed

    def next_iteration(self) -> Lineage:
        """The lineage of a new pass over the whole dataset."""
        self._iterations += 1
        return (self._iterations - 1,)

    def state(self) -> Dict[str, Any]:
        seeds, caches = dict(self.seeds), dict(self.cache_sources)  # (copied at once: a prefetch thread may add)
        return {"iterations": self._iterations,
                "seeds": {str(k): v for k, v in seeds.items()},
                "caches": {str(k): v for k, v in caches.items()}}

    def load_state(self, state: Dict[str, Any]) -> None:
        self._iterations = int(state.get("iterations", 0))
        self.seeds = {int(k): int(v) for k, v in state.get("seeds", {}).items()}
        self.caches = {}
        self.cache_sources = {int(k): v for k, v in state.get("caches", {}).items()}
