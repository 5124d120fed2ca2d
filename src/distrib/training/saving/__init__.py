"""The saving wing: a model's state, weights and files, and the names a file may use.

Who owns what:

* `model_persistence`: the `Model` methods (state dicts, weights, summary, save, export).
* `model_save`: ``Model.save`` (a directory; `distrib.training.model_load` reads it back).
* `weights`: ``save_weights`` / ``load_weights`` (safetensors).
* `model_state`: module, optimizer and metric state as one dict.
* `architecture` / `serialization`: the module tree and compile arguments as JSON;
  `registry`: the names a file may rebuild (the trust model).
* `keras_io`: Keras 3 models.
"""
