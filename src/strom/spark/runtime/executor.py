"""What the executor-side runners of both execution modes share: the summary row a stream task
returns to the driver at the end of a batch, and the application's config as an executor sees it."""

from __future__ import annotations

import os
from collections.abc import Callable
from dataclasses import dataclass
from typing import Any

import pyarrow as pa

from strom.streams.config import StreamsConfig

__all__ = [
    "STATE_DIR_VARIABLE",
    "SUMMARY_DDL",
    "SUMMARY_SCHEMA",
    "BatchSink",
    "TaskSummary",
    "executor_config",
]

SUMMARY_SCHEMA = pa.schema([
    ("task", pa.string()),
    ("records", pa.int64()),
    ("output", pa.int64()),
    ("restored", pa.int64()),
    ("skipped", pa.bool_()),
    ("reused", pa.bool_()),
    ("millis", pa.float64()),
])
SUMMARY_DDL = ("task string, records long, output long, restored long, skipped boolean, reused boolean, "
               "millis double")


BatchSink = Callable[[list[Any]], None]
"""Where the driver hands a finished batch's summary rows (one per stream task), in either mode."""

@dataclass
class TaskSummary:
    task: str
    records: int = 0
    output: int = 0
    restored: int = 0
    skipped: bool = False
    reused: bool = False
    millis: float = 0.0

    def to_arrow(self) -> pa.RecordBatch:
        return pa.RecordBatch.from_pylist([self.__dict__], schema=SUMMARY_SCHEMA)


STATE_DIR_VARIABLE = "STROM_STATE_DIR"


def executor_config(props: dict[str, Any]) -> StreamsConfig:
    """The application's config as an executor uses it: ``STROM_STATE_DIR`` in the executor's
    environment (set on a worker, inherited by its executors and Python workers) replaces
    ``state.dir``, so each machine keeps its stores on its own local disk."""
    local_state = os.environ.get(STATE_DIR_VARIABLE)
    return StreamsConfig({**props, "state.dir": local_state} if local_state else props)


