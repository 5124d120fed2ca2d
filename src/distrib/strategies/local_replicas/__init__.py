"""Local replicas: one process per local device, and what each of those processes does.

Who owns what:

* ``connect.py``: replica 0 re-runs the program once per extra device; every replica joins the job
  (`LocalReplicas`, `connect_replicas`).
* ``replica_process.py``: code outside every scope in a local-replica process (trains alike, side
  effects once, `DivergedReplicasError`).
* ``local_results.py``: ``experimental_local_results``, the values of this task's local replicas.
* ``local_gpu.py``: which GPU a task uses, from its index among the tasks on its machine.

Device names are `distrib.strategies.devices`'s; the strategies (mirrored, multi-worker, base) use these.
"""
