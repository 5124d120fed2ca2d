"""The transforms wing of `distrib.data`: the serial operators a `Dataset` method creates.

Who owns what: `elementwise` (map, filter, take, skip, repeat, ...), `batching`
(batch, unbatch), `padding` (padded_batch), `shuffle`, `cache` (in memory or
through the `caching` wing), `combinators` (zip, concatenate, interleave,
flat_map), `windowing` (window, rebatch, ragged_batch), `folds` (scan, unique,
reduce, ...), `grouping` (group_by_window, bucketing), `choosing`
(choose/sample from datasets, counter), `map_spec` (a map's element_spec),
`random_draws` (per-element random numbers), `element_state` (state held
between steps). See docs/layout.md.
"""
__all__: list = []
