"""Benchmarks: our runtime side by side with Temporal's OpenAI Agents integration.

`python -m bench.run` (or `make bench`) runs everything and writes `bench/results/`. Modules
imported by the peer's virtualenv (`proto`, `peer/`) use only the standard library, Temporal
and the OpenAI Agents SDK; they never import `hitl`.
"""
