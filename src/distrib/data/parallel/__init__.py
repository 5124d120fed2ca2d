"""The parallel executor wing of distrib.data: worker pools, parallel map, background prefetch, parallel interleave.

Every operator here yields the elements its serial counterpart yields (in
the same order unless ``deterministic=False``) and keeps exact resume with
work in flight; see docs/input-pipelines.md ("Parallel input").
"""

__all__: list = []
