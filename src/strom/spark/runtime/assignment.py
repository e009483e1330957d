"""Which stream thread runs which stream tasks in one real-time batch.

Like Kafka Streams' sticky task assignor: a task stays where its stores are open. A thread that
starts in a Python worker holding parked tasks (its previous batch ran there) keeps them; the
tasks no worker holds go, in order, to the thread with the fewest tasks. As in Kafka Streams'
HighAvailabilityTaskAssignor, the stateful tasks (those with a changelog) are spread first, each
thread up to its share of them, then the stateless ones, each thread up to its share of all tasks:
balancing the count alone let state pile onto one thread (after growing from one thread to two,
the first kept the first half of its sorted tasks, the stateless ones, and the second got all the
state). Spark decides which worker runs which thread index, so stickiness follows the worker, not
the index.
"""

from __future__ import annotations

from collections.abc import Collection, Mapping, Sequence

__all__ = ["assign_standbys", "assign_tasks"]


def assign_tasks(tasks: Sequence[str], threads: Sequence[int], parked: Mapping[int, Sequence[str]],
                 standbys: Mapping[int, Mapping[str, int]] | None = None, acceptable_lag: int = 0,
                 stateful: Collection[str] | None = None) -> dict[int, list[str]]:
    """``threads``: the indexes of the threads present; ``parked``: thread index -> the tasks parked
    in its worker; ``standbys``: thread index -> the standby tasks its worker holds, with their lag;
    ``stateful``: the tasks that have state (None: all count alike). Every task goes to exactly one
    thread; no thread gets more than its fair share (rounded up) of the stateful tasks, nor of all
    tasks. With fewer threads than before (a lost executor) the survivors keep their tasks and take
    the others over, each preferably where a caught-up standby of it is (lag at most
    ``acceptable_lag``: Kafka Streams' ``acceptable.recovery.lag``), the least behind first."""
    assignment: dict[int, list[str]] = {i: [] for i in threads}
    with_state = [task for task in tasks if stateful is None or task in stateful]
    without = [task for task in tasks if task not in with_state]
    _place(with_state, assignment, parked, -(-len(with_state) // len(threads)), standbys or {},
           acceptable_lag)
    _place(without, assignment, parked, -(-len(tasks) // len(threads)), {}, acceptable_lag)
    return assignment


def _place(tasks: Sequence[str], assignment: dict[int, list[str]], parked: Mapping[int, Sequence[str]],
           cap: int, standbys: Mapping[int, Mapping[str, int]], acceptable_lag: int) -> None:
    """Adds each of ``tasks`` to one thread of ``assignment`` holding fewer than ``cap`` tasks: the
    thread it is parked at, else one with a caught-up standby of it, else the one with the fewest."""
    wanted = set(tasks)
    for thread in sorted(parked):
        for task in parked[thread]:
            if thread in assignment and task in wanted and len(assignment[thread]) < cap:
                assignment[thread].append(task)
                wanted.discard(task)
    for task in tasks:
        if task in wanted:
            caught_up = [(standbys[i][task], i) for i in assignment if i in standbys
                         and 0 <= standbys[i].get(task, -1) <= acceptable_lag and len(assignment[i]) < cap]
            least = min(assignment, key=lambda i: (len(assignment[i]), i))
            assignment[min(caught_up)[1] if caught_up else least].append(task)


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
