"""Layer patches: layers in a multi-replica scope compute as one process would on the global batch.

Who owns what:

* ``batch_norm.py``: torch ``BatchNorm1d/2d/3d`` take global-batch statistics (one all-reduce per layer).
* ``global_dropout.py``: torch dropout (modules and ``torch.nn.functional``) drops by each element's global row.
* ``keyed_hash.py``: the keyed hash behind those masks (a pure function of a key and a global index).
* ``keras_random.py``: Keras 3's seeded dropout and noise draws keyed by global row.
* ``keras_global_layers.py``: adopting Keras 3 layers (``BatchNormalization``, dropout, noise) into a scope.
* ``share_warning.py``: the one warning where an elastic job's result depends on a replica's share.

`distrib.strategies.replication.ScopeTracker` installs them; nothing here imports it.
"""
