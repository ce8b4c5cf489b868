"""Our side of the benchmark: agents served by `python -m worker`, and the driver."""
