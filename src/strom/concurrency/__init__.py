"""Key-ordered concurrency, below both ``strom.tasks`` (Decaton-style processors) and ``strom.streams``
(``KStream.map_values_concurrently``): N units, each processing its items in order, a key always on
the same unit. It knows nothing of Kafka."""

from strom.concurrency.key_ordered import AsyncRuntime, KeyOrderedExecutor, SubPartitioner

__all__ = ["AsyncRuntime", "KeyOrderedExecutor", "SubPartitioner"]
