"""The produce path's record check: the strided fast check of same-sized records accepts a batch only
where the record-by-record walk accepts it, and takes the records producers write."""

from __future__ import annotations

from hypothesis import given, settings
from hypothesis import strategies as st

from strom.broker.log.records import (
    HEADER_SIZE,
    InvalidBatchError,
    Record,
    _check_record_offsets,
    _uniform_records,
    encode_batch,
)


def body_of(records: list[Record]) -> bytes:
    return bytes(encode_batch(records, 0)[HEADER_SIZE:])


def walk_accepts(body: bytes, count: int) -> bool:
    try:
        _check_record_offsets(body, count)
        return True
    except InvalidBatchError:
        return False


@settings(max_examples=300, deadline=None)
@given(count=st.sampled_from([1, 2, 63, 64, 65, 200, 8191, 8192, 8193]), size=st.integers(0, 9000),
       jitter=st.booleans(), time_step=st.sampled_from([0, 1, 70]), flip=st.integers(-1, 10**9),
       claimed=st.integers(-2, 2))
def test_the_fast_check_accepts_only_what_the_walk_accepts(count, size, jitter, time_step, flip, claimed):
    records = [Record(i, 1000 + i * time_step, None, b"x" * (size + (i % 3 if jitter else 0)))
               for i in range(count)]
    body = bytearray(body_of(records))
    if flip >= 0:
        body[flip % len(body)] ^= 1 << (flip % 8)
    body, count = bytes(body), count + claimed
    if _uniform_records(body, count):
        assert walk_accepts(body, count)


def test_records_of_one_size_take_the_fast_check():
    for count in (1, 64, 1000, 9000):
        for size in (0, 100, 1024, 8000):
            body = body_of([Record(i, 1000 + i % 50, None, b"x" * size) for i in range(count)])
            assert _uniform_records(body, count) and walk_accepts(body, count)
    keyed = body_of([Record(i, 1000, b"key", b"v" * 100) for i in range(300)])
    assert _uniform_records(keyed, 300)
    assert not _uniform_records(keyed, 299) and not walk_accepts(keyed, 299)
