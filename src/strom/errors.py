"""Errors a user of strom can cause. Each message says what happened and what to do."""

from __future__ import annotations

import os
import sysconfig
import traceback
from pathlib import Path

__all__ = [
    "BrokerStartError",
    "BrokerUnavailableError",
    "CoPartitioningError",
    "ConfigError",
    "DataLossError",
    "InvalidStateStoreError",
    "JavaNotFoundError",
    "NullKeyError",
    "OffsetRegressionError",
    "ProcessingError",
    "ProcessorStateError",
    "ProducerFencedError",
    "SerializationError",
    "StromError",
    "SuppressionBufferFullError",
    "TopologyError",
    "TransactionStalledError",
    "TransactionalIdNotFoundError",
    "UnknownTopicError",
    "VersionedTimestampError",
    "WindowSpecError",
    "raised_at",
]

_STROM_DIR = str(Path(__file__).resolve().parent) + os.sep
_PYTHON_DIRS = tuple({sysconfig.get_paths()[name] + os.sep for name in ("stdlib", "platstdlib", "purelib",
                                                                         "platlib")})


def raised_at(exc: BaseException) -> str:
    """Where the application's own code raised (``app.py:12, in parse``), for a user reading the error
    far from the process that ran it: the innermost frame outside strom, preferably outside the Python
    installation too; a syntax error's own place; "" when strom alone is on the stack."""
    if isinstance(exc, SyntaxError) and exc.filename:
        return f"{exc.filename}:{exc.lineno}"
    frames = [f for f in traceback.extract_tb(exc.__traceback__) if not f.filename.startswith(_STROM_DIR)]
    own = [f for f in frames if not f.filename.startswith(_PYTHON_DIRS)] or frames
    return f"{own[-1].filename}:{own[-1].lineno}, in {own[-1].name}" if own else ""


class StromError(Exception):
    """Base of every error strom raises for a problem the user can fix."""


class ConfigError(StromError, ValueError):
    """A configuration key is unknown or its value is invalid."""

    @classmethod
    def unknown_key(cls, key: str, known: list[str] | tuple[str, ...]) -> ConfigError:
        import difflib

        hint = difflib.get_close_matches(key, list(known), n=1)
        suggestion = f" Did you mean {hint[0]!r}?" if hint else ""
        return cls(f"Unknown configuration key {key!r}.{suggestion} Check the spelling against "
                   "the documented keys (docs/configuration.md).")

    @classmethod
    def bad_value(cls, key: str, value: object, expected: str) -> ConfigError:
        return cls(f"Invalid value {value!r} for configuration {key!r}: expected {expected}.")


class JavaNotFoundError(StromError):
    """Spark needs Java 17 or newer on PATH (or JAVA_HOME)."""


class BrokerUnavailableError(StromError):
    """No Kafka broker answered at the configured bootstrap servers."""


class TransactionStalledError(BrokerUnavailableError):
    """A transactional producer's call did not return in its timeout: the producer is stuck for good (a
    new producer of the same transactional.id fences it and aborts its transaction)."""


class TransactionAbortableError(BrokerUnavailableError):
    """A transaction failed with an error it can only be aborted after (a coordinator loading or moving, a
    request timed out): it was aborted; the work starts again from the last commit."""


class BrokerStartError(StromError):
    """The strom broker cannot start: its port is taken or its data directory is unusable."""


class UnknownTopicError(StromError):
    """A topic that the application needs does not exist."""


class TopologyError(StromError):
    """The topology is invalid: a missing store, a cycle, a name used twice and so on."""


class CoPartitioningError(TopologyError):
    """Joined or merged inputs do not have the same number of partitions."""


class SerializationError(StromError):
    """A record could not be serialized or deserialized with the configured serde."""


class ProcessingError(StromError):
    """A user processor raised while processing a record; the record is named in the message."""


class DataLossError(StromError):
    """Offsets a Spark query still had to read are gone (retention, deleted or recreated topic)."""


class TransactionalIdNotFoundError(StromError):
    """The broker's transaction coordinator does not know a transactional.id."""


class InvalidStateStoreError(StromError):
    """A state store was used before it was initialised or after it was closed."""


class ProcessorStateError(StromError):
    """A task's local state cannot be used: a store's files cannot be opened, or its checkpoint is corrupt."""


class ProducerFencedError(StromError):
    """Another producer took over this one's transactional.id (init_transactions): a newer attempt of the
    same stream thread or task, or the driver fencing a thread it counts as lost."""


class WindowSpecError(StromError, ValueError):
    """A window, grace period or join window was given an invalid duration."""


class SuppressionBufferFullError(StromError):
    """A suppression buffer configured with shut_down_when_full() ran out of room."""


class NullKeyError(StromError, ValueError):
    """State stores do not accept None keys (Kafka Streams drops null-key records before stores)."""


class VersionedTimestampError(StromError, TypeError):
    """A versioned store was given a timestamp that is not whole milliseconds."""


class OffsetRegressionError(StromError, RuntimeError):
    """A Decaton-style processor reported an offset below one it reported before for the same partition."""
