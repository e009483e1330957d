"""OutOfOrderCommitControl: the commit-ready offset never passes an incomplete offset."""

import time

import pytest
from hypothesis import given, settings
from hypothesis import strategies as st

from strom.errors import OffsetRegressionError
from strom.tasks import Completion, OutOfOrderCommitControl, TimeoutChoice


def test_seed_example_commits_only_contiguous_completions() -> None:
    control = OutOfOrderCommitControl()
    states = {o: control.report_fetched_offset(o) for o in range(1, 8)}
    states[1].complete()
    control.update_high_watermark()
    assert control.commit_ready_offset() == 1
    for o in (3, 4, 5):
        states[o].complete()
    control.update_high_watermark()
    assert control.commit_ready_offset() == 1
    states[2].complete()
    states[6].complete()
    control.update_high_watermark()
    assert control.commit_ready_offset() == 6
    assert control.pending_count() == 1


@settings(max_examples=200, deadline=None)
@given(st.integers(1, 60).flatmap(
    lambda n: st.tuples(st.just(n), st.permutations(range(n)), st.lists(st.integers(0, 200), max_size=20),
                        st.lists(st.integers(1, 8), min_size=1, max_size=60))))
def test_never_commits_past_an_incomplete_offset(case) -> None:
    n, completion_order, gaps, batch_sizes = case
    control = OutOfOrderCommitControl()
    base = 1000
    offsets, o = [], base
    for i in range(n):  # offsets may have gaps (compacted topics, transaction markers)
        o += 1 + (gaps[i] if i < len(gaps) else 0)
        offsets.append(o)
    reported = 0
    for size in batch_sizes:  # fetched in batches, as a consumer returns them
        control.report_fetched_offsets(offsets[reported:reported + size])
        reported += size
    control.report_fetched_offsets(offsets[reported:])
    done: set[int] = set()
    for index in completion_order:
        control.complete(offsets[index])
        done.add(offsets[index])
        control.update_high_watermark()
        ready = control.commit_ready_offset()
        incomplete = [off for off in offsets if off not in done]
        if incomplete:
            assert ready < min(incomplete)
        if ready >= 0:
            assert all(off in done for off in offsets if off <= ready)
        contiguous = 0
        while contiguous < n and offsets[contiguous] in done:
            contiguous += 1
        assert ready == (offsets[contiguous - 1] if contiguous else -1)
    assert control.commit_ready_offset() == offsets[-1]
    assert control.pending_count() == 0


def test_an_offset_reported_again_or_below_the_latest_is_rejected() -> None:
    control = OutOfOrderCommitControl()
    control.report_fetched_offsets([5, 6, 9])
    for offsets in ([9], [7, 10], [3]):
        with pytest.raises(OffsetRegressionError, match="after 9"):
            control.report_fetched_offsets(offsets)
    with pytest.raises(OffsetRegressionError):
        control.report_fetched_offset(8)
    control.report_fetched_offsets([10, 11])
    assert control.pending_count() == 5


def test_deferred_completion_timeout_gives_up_or_extends() -> None:
    control = OutOfOrderCommitControl()
    given_up, extended = control.report_fetched_offset(0), control.report_fetched_offset(1)
    first = Completion()
    calls: list[int] = []

    def extend_once(c: Completion) -> TimeoutChoice:
        calls.append(1)
        return TimeoutChoice.EXTEND if len(calls) == 1 else TimeoutChoice.GIVE_UP

    second = Completion(on_timeout=extend_once)
    for state, completion in ((given_up, first), (extended, second)):
        state.deferred.append(completion)
        completion.when_complete(state.complete)
        state.timeout_at = time.monotonic() + 0.05
    control.update_high_watermark(50)
    assert control.commit_ready_offset() == -1
    time.sleep(0.06)
    control.update_high_watermark(50)
    assert first.is_complete() and not second.is_complete()
    assert control.commit_ready_offset() == 0
    assert len(calls) == 1
    time.sleep(0.06)
    control.update_high_watermark(50)
    assert second.is_complete() and control.commit_ready_offset() == 1
    assert control.expired == 2
