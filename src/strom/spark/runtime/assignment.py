"""Which stream thread runs which stream tasks in one real-time batch.

Like Kafka Streams' sticky task assignor: a task stays where its stores are open. A thread that
starts in a Python worker holding parked tasks (its previous batch ran there) keeps them; the
tasks no worker holds go, in order, to the thread with the fewest tasks. Spark decides which
worker runs which thread index, so stickiness follows the worker, not the index.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence

__all__ = ["assign_tasks"]


def assign_tasks(tasks: Sequence[str], threads: int, parked: Mapping[int, Sequence[str]]
                 ) -> dict[int, list[str]]:
    """``parked``: thread index -> the tasks parked in its worker. Every task goes to exactly one of
    ``threads`` threads; no thread gets more than its fair share (rounded up) of tasks."""
    cap = -(-len(tasks) // threads)
    assignment: dict[int, list[str]] = {i: [] for i in range(threads)}
    wanted = set(tasks)
    for thread in sorted(parked):
        for task in parked[thread]:
            if task in wanted and len(assignment[thread]) < cap:
                assignment[thread].append(task)
                wanted.discard(task)
    for task in tasks:
        if task in wanted:
            least = min(assignment, key=lambda i: (len(assignment[i]), i))
            assignment[least].append(task)
    return assignment
