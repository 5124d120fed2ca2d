"""The on-disk cache of `Dataset.cache(filename)`: record encoding, file layout, and its iterators.

Who owns what: `records` turns elements into bytes and back (JSON + safetensors,
no pickle); `cache_file` owns the file (framing, CRCs, index, atomic publish,
validation, per-process names); `file_cache` owns the iterators (fill on the
first complete pass, stream afterwards, resume). See docs/input-pipelines.md.
"""
__all__: list = []
