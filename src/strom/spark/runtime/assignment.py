"""Which stream thread runs which stream tasks in one real-time batch.

Like Kafka Streams' sticky task assignor: a task stays where its stores are open. A thread that
starts in a Python worker holding parked tasks (its previous batch ran there) keeps them; the
tasks no worker holds go, in order, to the thread with the fewest tasks. Spark decides which
worker runs which thread index, so stickiness follows the worker, not the index.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

__all__ = ["assign_standbys", "assign_tasks"]


def assign_tasks(tasks: Sequence[str], threads: Sequence[int], parked: Mapping[int, Sequence[str]],
                 standbys: Mapping[int, Mapping[str, int]] | None = None, acceptable_lag: int = 0
                 ) -> dict[int, list[str]]:
    """``threads``: the indexes of the threads present; ``parked``: thread index -> the tasks parked
    in its worker; ``standbys``: thread index -> the standby tasks its worker holds, with their lag.
    Every task goes to exactly one thread; no thread gets more than its fair share (rounded up) of
    tasks. With fewer threads than before (a lost executor) the survivors keep their tasks and take
    the others over, each preferably where a caught-up standby of it is (lag at most
    ``acceptable_lag``: Kafka Streams' ``acceptable.recovery.lag``), the least behind first."""
    cap = -(-len(tasks) // len(threads))
    assignment: dict[int, list[str]] = {i: [] for i in threads}
    wanted = set(tasks)
    for thread in sorted(parked):
        for task in parked[thread]:
            if thread in assignment and task in wanted and len(assignment[thread]) < cap:
                assignment[thread].append(task)
                wanted.discard(task)
    held = standbys or {}
    for task in tasks:
        if task in wanted:
            caught_up = [(held[i][task], i) for i in assignment if i in held
                         and 0 <= held[i].get(task, -1) <= acceptable_lag and len(assignment[i]) < cap]
            least = min(assignment, key=lambda i: (len(assignment[i]), i))
            target = min(caught_up)[1] if caught_up else least
            assignment[target].append(task)
    return assignment


def assign_standbys(assignment: Mapping[int, Sequence[str]], replicas: int, machines: Mapping[int, str],
                    held: Mapping[int, Mapping[str, int]] | None = None,
                    stateful: Collection[str] | None = None) -> dict[int, list[str]]:
    """Up to ``replicas`` standbys of every task (of every ``stateful`` one: a task without a changelog
    has nothing to keep warm), each on a thread of another machine than the task's
    active and its other standbys (``machines``: thread -> its host and state directory; a standby
    on the active's machine would share its directory), preferably where one is held already, else
    on the thread with the fewest standbys. A task gets fewer when there are not enough machines."""
    standbys: dict[int, list[str]] = {i: [] for i in assignment}
    have = held or {}
    for thread in sorted(assignment):
        for task in assignment[thread]:
            if stateful is not None and task not in stateful:
                continue
            used = {machines[thread]}
            for _ in range(replicas):
                candidates = [i for i in assignment if machines[i] not in used]
                if not candidates:
                    break
                best = min(candidates, key=lambda i: (task not in have.get(i, {}), len(standbys[i]), i))
                standbys[best].append(task)
                used.add(machines[best])
    return standbys
