"""The one line an elastic job gets where a replica's result depends on its share of the global batch.

distrib makes batch normalisation and dropout global-batch (`batch_norm`,
`global_dropout`, `keras_global_layers`), so a job that changes its number of
workers ends as a fixed-size run would. Where the program turns that off, or
uses a layer distrib does not key, the result depends on each replica's share:
this says so once, before training, on replica 0.
"""
from __future__ import annotations

import logging
from typing import TYPE_CHECKING, List, Optional, Sequence

from distrib.comm.options import CommunicationOptions

if TYPE_CHECKING:  # pragma: no cover
    from distrib.strategies.interface import Strategy

_log = logging.getLogger("distrib.strategies")

__all__ = ["say_if_a_resize_changes_the_result"]


def say_if_a_resize_changes_the_result(strategy: "Strategy", options: Optional[CommunicationOptions],
                                       keras_layers: Sequence[str] = ()) -> Optional[str]:
    """Warn once (replica 0) where an elastic job's options or layers tie a replica's result to its share.

    With ``sync_batch_norm=False`` each replica normalises with its own rows'
    statistics, with ``global_batch_dropout=False`` its dropout masks depend on
    where its rows sit among its own, and Keras's random preprocessing layers
    (``keras_layers``: their class names, which `ScopeTracker` finds in the
    models it adopts) draw by the replica's rows; either way a job that changes
    its number of workers no longer ends as a fixed-size run would. The
    strategy says its options when it is made (``options``), the tracker the
    layers (``options=None``) before the first step. Returns the line (None
    where nothing is said).

    Example (an elastic job of 2 workers with a ``RandomFlip`` in its model):
        ``distrib: this job is elastic but the model's Keras random preprocessing layer RandomFlip makes each
        replica's result depend on its share of the global batch: ...``
    """
    from distrib.comm.elastic import elastic_enabled

    local = [f"{name}=False" for name in ("sync_batch_norm", "global_batch_dropout")
             if options is not None and not getattr(options, name)]
    causes = ([f"CommunicationOptions({', '.join(local)})"] if local else []) + _layer_cause(keras_layers)
    if (not causes or not elastic_enabled() or strategy.num_replicas_in_sync <= 1
            or getattr(strategy, "replica_id", 0) != 0):
        return None
    verb = "make" if len(causes) > 1 or len(keras_layers) > 1 else "makes"
    line = (f"distrib: this job is elastic but {' and '.join(causes)} {verb} each "
            "replica's result depend on its share of the global batch: if workers join or leave, the "
            "result differs from a fixed-size run's (see docs/elastic.md)")
    _log.warning(line)
    return line


def _layer_cause(names: Sequence[str]) -> List[str]:
    """``["the model's Keras random preprocessing layers RandomFlip, RandomZoom"]``; [] for no names."""
    if not names:
        return []
    return [f"the model's Keras random preprocessing layer{'s' if len(names) > 1 else ''} {', '.join(names)}"]
