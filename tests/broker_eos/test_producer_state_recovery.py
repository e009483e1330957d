"""Property: producer state rebuilt from any snapshot plus the log equals the live state."""

from __future__ import annotations

import tempfile
import time
from pathlib import Path

from hypothesis import given, settings
from hypothesis import strategies as st

from broker_eos.batches import data_batch
from broker_eos.memory_log import Log
from strom.broker.producer_state import AppendRejectedError, ProducerStateManager
from strom.broker.transactions.markers import control_batch

# (producer id, action): send a batch, resend an earlier one, end the transaction, or snapshot
operations = st.lists(st.tuples(st.integers(1, 3), st.sampled_from(["send", "txn", "resend", "commit",
                                                                      "abort", "snapshot"])),
                      max_size=60)


def _state(manager: ProducerStateManager) -> tuple:
    producers = sorted((p.to_json() for p in manager.active_producers()), key=lambda p: p["pid"])
    for p in producers:
        p.pop("last_timestamp")
    return (producers, manager.first_unstable_offset(),
            [(a.producer_id, a.first_offset, a.last_offset) for a in manager.aborted_transactions(0, 10**9)])


@settings(max_examples=60, deadline=None)
@given(operations)
def test_rebuilt_state_equals_live_state(ops: list[tuple[int, str]]) -> None:
    with tempfile.TemporaryDirectory() as tmp:
        log = Log(ProducerStateManager(Path(tmp) / "p"))
        sequences: dict[int, int] = {}
        sent: dict[int, list[bytes]] = {}
        for pid, action in ops:
            seq = sequences.get(pid, 0)
            try:
                if action in ("send", "txn"):
                    batch = data_batch(pid, 0, seq, [b"v"] * (1 + seq % 3), transactional=action == "txn")
                    log.produce(batch)
                    sequences[pid] = seq + 1 + seq % 3
                    sent.setdefault(pid, []).append(batch)
                elif action == "resend" and sent.get(pid):
                    end = log.end
                    log.produce(sent[pid][-1 - seq % min(5, len(sent[pid]))])
                    assert log.end == end  # a resent batch is never written twice
                elif action in ("commit", "abort"):
                    log.produce(control_batch(pid, 0, action == "commit", 0, int(time.time() * 1000)))
                elif action == "snapshot":
                    log.state.take_snapshot()
            except AppendRejectedError:
                pass  # e.g. a plain batch inside an open transaction: refused, nothing written
        live = _state(log.state)
        rebuilt = ProducerStateManager(Path(tmp) / "p")
        rebuilt.load(0, log.end, log.replay)
        assert _state(rebuilt) == live
