"""A worker or ps task of `create_in_process_cluster`: ``python -m distrib.testing.ps_task``.

Its ``TF_CONFIG`` names the task; `ParameterServerStrategy` serves it until
the chief's strategy ends, then the program exits. A module (not ``python -c``)
so that the test harness's preloaded server can fork it.
"""
import distrib

if __name__ == "__main__":
    distrib.experimental.ParameterServerStrategy()
