"""The byte path of a checkpoint: what is written, how, and how it is read back safely.

Who owns what:

* `storage`: atomic, checksummed checkpoint directories (`AtomicDirectory`, `verify`,
  `is_complete`), where each worker writes; re-exports the error classes.
* `state_file` / `format` / `skeleton`: one nested state in one safetensors file
  (never pickle), its JSON skeleton, and the checks on untrusted input.
* `safetensors_io`: the safetensors header and tensors, streamed.
* `manifest` / `hash_pipe`: the per-file checksums of a directory, hashed as it is written.
* `inplace_restore`: reading a file straight into the objects' own tensors.
* `background`: the writes a save hands to a background thread.
* `fs`: the file system (local or fsspec) a path names.

The API (`Checkpoint`, `CheckpointManager`), the choice of what to save and
preemption stay in `distrib.checkpoint`.
"""
