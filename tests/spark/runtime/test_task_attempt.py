"""One stream task over one micro-batch (the executor side), against the broker, without Spark.

A replayed batch is recognised by the committed offsets and skipped; a batch whose processing
fails aborts its transaction (nothing visible read_committed, the store untouched) and the next
attempt processes it once.
"""

from __future__ import annotations

import pytest

from strom.errors import ProcessingError

from .conftest import read_updates
from .task_batches import counting_app, counts, run_batch

pytestmark = [pytest.mark.broker]


def test_replayed_batch_is_skipped_and_failed_batch_leaves_nothing(broker, topics, tmp_path):
    bootstrap = broker.bootstrap_servers
    names = topics(source=1, sink=1)
    topology, config = counting_app(bootstrap, names, str(tmp_path), "rt-attempt",
                                    [("a", "x"), ("b", "x"), ("a", "x"), ("a", "boom"), ("b", "x")])

    first = run_batch(topology, config, bootstrap, names["source"], 0, 3)
    assert (first.records, first.skipped) == (3, False)
    replay = run_batch(topology, config, bootstrap, names["source"], 0, 3)
    assert replay.skipped and replay.records == 0

    failing = counts(names["source"], names["sink"], fail_on="boom")
    with pytest.raises(ProcessingError, match="bad record boom"):
        run_batch(failing, config, bootstrap, names["source"], 3, 5, run_id="failing")
    assert read_updates(bootstrap, names["sink"]) == {"a": [2], "b": [1]}  # aborted: nothing new

    retry = run_batch(topology, config, bootstrap, names["source"], 3, 5)
    assert (retry.records, retry.restored, retry.skipped) == (2, 0, False)  # store was untouched
    assert read_updates(bootstrap, names["sink"]) == {"a": [2, 3], "b": [1, 2]}
