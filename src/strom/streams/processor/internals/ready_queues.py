"""The order in which Kafka's TopologyTestDriver takes its next record: from the non-empty input queue
whose head has the smallest timestamp, equal timestamps broken the way ``java.util.PriorityQueue`` (a
binary heap, which Kafka's ``PartitionGroup`` uses) breaks them. Kafka's driver runs the whole topology
as one task, so the test driver keeps this order over the queues of all its tasks; a topology whose
one record reaches three repartition topics at once processes them in the heap's order (1, 3, 2), not
first come first served.
"""

from __future__ import annotations

from typing import Any

__all__ = ["ReadyQueues"]


class ReadyQueues:
    """Entries by a timestamp fixed when offered, popped as Java's PriorityQueue pops them."""

    def __init__(self) -> None:
        self._heap: list[tuple[int, Any]] = []
        self._members: set[int] = set()

    def __len__(self) -> int:
        return len(self._heap)

    def __contains__(self, entry: Any) -> bool:
        return id(entry) in self._members

    def offer(self, timestamp: int, entry: Any) -> None:
        """Adds ``entry`` (at most once) ordered by ``timestamp``; sifts up past strictly larger ones."""
        self._members.add(id(entry))
        heap = self._heap
        heap.append((timestamp, entry))
        k = len(heap) - 1
        while k > 0:
            parent = (k - 1) >> 1
            if timestamp >= heap[parent][0]:
                break
            heap[k] = heap[parent]
            k = parent
        heap[k] = (timestamp, entry)

    def poll(self) -> Any:
        """Removes and returns the entry at the root; the last entry sifts down from there, moving
        below a child only when strictly larger, to the right child only when it is strictly smaller."""
        heap = self._heap
        root = heap[0][1]
        self._members.discard(id(root))
        last = heap.pop()
        n = len(heap)
        if n:
            k = 0
            while k < n >> 1:
                child = 2 * k + 1
                if child + 1 < n and heap[child][0] > heap[child + 1][0]:
                    child += 1
                if last[0] <= heap[child][0]:
                    break
                heap[k] = heap[child]
                k = child
            heap[k] = last
        return root
