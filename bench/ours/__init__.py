"""Our side of the benchmark: agents served by `python -m hitl.worker`, and the driver."""
