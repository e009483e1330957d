"""The metered layers, outermost, one module per store kind: turn typed keys and values into bytes and
count every operation, for key-value, timestamped key-value, window, timestamped window, session and
versioned stores.

Processors and interactive queries talk to these layers; everything below works on bytes. They also
adapt the caching layer's flush listener to typed values (as Kafka's MeteredKeyValueStore.setFlushListener).
Timestamped stores hold ``ValueAndTimestamp`` values, stored as Kafka does: an 8-byte timestamp
followed by the serialized value.
"""

from strom.streams.state.internals.metered.key_value import MeteredKeyValueStore
from strom.streams.state.internals.metered.session import MeteredSessionStore
from strom.streams.state.internals.metered.store import MeteredStore
from strom.streams.state.internals.metered.store_metrics import StoreMetrics
from strom.streams.state.internals.metered.timestamped_key_value import MeteredTimestampedKeyValueStore
from strom.streams.state.internals.metered.timestamped_window import MeteredTimestampedWindowStore
from strom.streams.state.internals.metered.versioned import MeteredVersionedKeyValueStore
from strom.streams.state.internals.metered.window import MeteredWindowStore

__all__ = [
    "MeteredKeyValueStore",
    "MeteredSessionStore",
    "MeteredStore",
    "MeteredTimestampedKeyValueStore",
    "MeteredTimestampedWindowStore",
    "MeteredVersionedKeyValueStore",
    "MeteredWindowStore",
    "StoreMetrics",
]
