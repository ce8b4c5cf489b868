"""Every workflow test runs twice: with a worker cache, and with `max_cached_workflows=0`.

With no cache, the worker replays the run from history on every workflow task, so a test
passes only if the workflow code is deterministic and keeps no state outside its history.
"""

from __future__ import annotations

from collections.abc import Iterator

import pytest

from tests import helpers


@pytest.fixture(autouse=True, params=[100, 0], ids=["cached", "replay-every-task"])
def worker_cache(request: pytest.FixtureRequest) -> Iterator[int]:
    """The cache size of every worker `serving()` starts in this test."""
    size = int(request.param)
    previous, helpers.DEFAULT_CACHE = helpers.DEFAULT_CACHE, size
    try:
        yield size
    finally:
        helpers.DEFAULT_CACHE = previous


@pytest.fixture
def cache_size(worker_cache: int) -> int:
    """The same size, for tests that pass it explicitly (overrides the root fixture)."""
    return worker_cache
