"""The typed versioned key-value store: values valid from a timestamp."""

from __future__ import annotations

from typing import Any

from strom.streams.state.internals.metered.store import MeteredStore
from strom.streams.state.internals.timestamps import MAX_TIMESTAMP, MIN_TIMESTAMP
from strom.streams.state.versioned import VersionedRecord, check_timestamp


class MeteredVersionedKeyValueStore(MeteredStore):
    """The typed versioned store: ``put(key, value, timestamp)``, ``get(key)`` (the latest),
    ``get(key, as_of_timestamp)`` and ``delete(key, timestamp)``; reads give ``VersionedRecord``s."""

    @property
    def history_retention_ms(self) -> int:
        return self.wrapped.history_retention_ms

    def put(self, key: Any, value: Any, timestamp: int) -> int:
        """Returns when the new version stops being valid: the next version's timestamp,
        ``PUT_RETURN_CODE_VALID_TO_UNDEFINED`` when it is the latest, ``PUT_RETURN_CODE_NOT_PUT`` when the
        timestamp is older than the history retention allows."""
        self.metrics.put += 1
        raw_value = None if value is None else self._value_ser(self._topic, value)
        return self.wrapped.put(self._raw_key(key), raw_value, check_timestamp(timestamp, self.name))

    def get(self, key: Any, as_of_timestamp: int | None = None) -> VersionedRecord | None:
        """The latest version, or the one valid at ``as_of_timestamp``; None if there is no value then
        (or ``as_of_timestamp`` is older than the history retention allows)."""
        self.metrics.get += 1
        as_of = MAX_TIMESTAMP if as_of_timestamp is None else check_timestamp(as_of_timestamp, self.name)
        found = self.wrapped.get(self._raw_key(key), as_of)
        if found is None:
            return None
        raw_value, valid_from, valid_to = found
        return VersionedRecord(self._value_de(self._topic, raw_value), valid_from, valid_to)

    def versions(self, key: Any, time_from: int | None = None,
                 time_to: int | None = None) -> list[VersionedRecord]:
        """Every version valid at some time in [time_from, time_to] (None: unbounded), the latest first;
        the versions before a deletion too (interactive queries' MultiVersionedKeyQuery)."""
        self.metrics.get += 1
        found = self.wrapped.versions(
            self._raw_key(key), MIN_TIMESTAMP if time_from is None else check_timestamp(time_from, self.name),
            MAX_TIMESTAMP if time_to is None else check_timestamp(time_to, self.name))
        return [VersionedRecord(self._value_de(self._topic, raw), valid_from, valid_to)
                for raw, valid_from, valid_to in found]

    def delete(self, key: Any, timestamp: int) -> VersionedRecord | None:
        """Writes a tombstone at ``timestamp``; returns the version that was valid then, if any."""
        self.metrics.delete += 1
        old = self.get(key, timestamp)
        self.put(key, None, timestamp)
        return old

    def set_flush_listener(self, listener: Any, send_old_values: bool) -> bool:
        """No cache: the processor forwards each update itself."""
        return False
