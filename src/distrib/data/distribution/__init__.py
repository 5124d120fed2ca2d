"""The distribution wing of `distrib.data`: datasets spread over replicas and workers.

Who owns what: `distributed` (distributed datasets), `distributed_iterator`
(one replica's batches, end-of-data agreement), `sharding` (auto-shard
policies), `feeds` (what a replica reads each step), `input_context`,
`input_options`, `batch_position` (a batch's place in the global batch),
`adapters` (torch datasets, loaders, arrays into a `Dataset`), `lookahead`,
`device_stager` (early copies to the accelerator). See docs/layout.md.
"""
__all__: list = []
