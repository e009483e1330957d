"""Properties: validation, static and watched-file suppliers, listeners."""

import json
import time

import pytest

from strom.errors import ConfigError
from strom.tasks import FilePropertySupplier, ProcessorProperties, StaticPropertySupplier
from strom.tasks.properties import ProcessorPropertiesView

P = ProcessorProperties


def test_static_values_are_validated_with_clear_errors() -> None:
    view = ProcessorPropertiesView([StaticPropertySupplier({"decaton.partition.concurrency": "8"})])
    assert view.value(P.PARTITION_CONCURRENCY) == 8
    assert view.value(P.MAX_PENDING_RECORDS) == 10_000
    with pytest.raises(ConfigError, match=r"decaton\.partition\.concurrency"):
        StaticPropertySupplier({"decaton.partition.concurrency": 0})
    with pytest.raises(ConfigError, match=r"Did you mean 'decaton\.max\.pending\.records'"):
        StaticPropertySupplier({"decaton.max.pending.record": 5})


def _wait_for(predicate, timeout: float = 5.0) -> bool:
    deadline = time.monotonic() + timeout
    while time.monotonic() < deadline:
        if predicate():
            return True
        time.sleep(0.02)
    return False


def test_file_supplier_reloads_and_notifies(tmp_path) -> None:
    path = tmp_path / "props.json"
    initial = {"decaton.partition.concurrency": 1, "decaton.processing.rate.per.partition": 50}
    path.write_text(json.dumps(initial))
    supplier = FilePropertySupplier(path, poll_interval_s=0.05)
    try:
        view = ProcessorPropertiesView([StaticPropertySupplier({"decaton.commit.interval.ms": 10}), supplier])
        changes: list[tuple[int, int]] = []
        view.get(P.PARTITION_CONCURRENCY).listen(lambda old, new: changes.append((old, new)))
        assert view.value(P.COMMIT_INTERVAL_MS) == 10
        assert view.value(P.PROCESSING_RATE) == 50
        time.sleep(0.02)  # mtime granularity
        path.write_text(json.dumps({"decaton.partition.concurrency": 8}))
        assert _wait_for(lambda: changes == [(1, 8)])
        assert _wait_for(lambda: view.value(P.PROCESSING_RATE) == -1)  # removed key: back to default
        time.sleep(0.02)
        path.write_text(json.dumps({"decaton.partition.concurrency": -3}))  # invalid: kept at 8
        time.sleep(0.3)
        assert view.value(P.PARTITION_CONCURRENCY) == 8
    finally:
        supplier.close()


def test_file_supplier_rejects_a_bad_file_at_start(tmp_path) -> None:
    with pytest.raises(ConfigError, match="does not exist"):
        FilePropertySupplier(tmp_path / "missing.json")
    bad = tmp_path / "bad.json"
    bad.write_text("[1, 2]")
    with pytest.raises(ConfigError, match="JSON object"):
        FilePropertySupplier(bad)
