"""The sources wing of `distrib.data`: datasets whose elements come from memory or Python code.

Who owns what: `in_memory` owns the source datasets (tensor slices, single
tensors, ranges, generators, iterables, file lists). File readers live in the
`readers` wing; ``generators.py`` (the generator signature) stays in the core
because `Dataset` itself uses it. See docs/layout.md.
"""
__all__: list = []
