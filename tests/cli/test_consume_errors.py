"""How `strom consume` treats the errors librdkafka hands it in place of a record."""

from __future__ import annotations

import io

import pytest
from confluent_kafka import KafkaError

from strom.cli.consume import Progress, _print, parse_format, recovering
from strom.cli.formats import FORMATS
from strom.errors import StromError


class _Message:
    """What ``Consumer.poll`` returns: an error, or a record of partition 0 of topic ``t``."""

    def __init__(self, value: bytes | None = None, error: KafkaError | None = None) -> None:
        self._value, self._error = value, error

    def error(self) -> KafkaError | None:
        return self._error

    def topic(self) -> str:
        return "t"

    def partition(self) -> int:
        return 0

    def value(self) -> bytes | None:
        return self._value

    def key(self) -> None:
        return None

    def offset(self) -> int:
        return 0

    def headers(self) -> None:
        return None

    def timestamp(self) -> tuple[int, int]:
        return (1, 0)


class _Polled:
    def __init__(self, *messages: _Message) -> None:
        self.messages = list(messages)

    def poll(self, _timeout: float) -> _Message | None:
        return self.messages.pop(0) if self.messages else None


def _consume(*messages: _Message) -> bytes:
    progress = Progress(assigned={("t", 0)})
    out = io.BytesIO()
    string = FORMATS["string"]
    _print(_Polled(*messages), progress, out, parse_format("%s\n"), string, string, None, True, None)
    return out.getvalue()


def test_a_dropped_connection_or_a_moving_leader_is_retried_not_fatal() -> None:
    assert recovering(KafkaError(KafkaError._TRANSPORT))
    assert recovering(KafkaError(KafkaError.NOT_LEADER_FOR_PARTITION))
    assert recovering(KafkaError(KafkaError.UNKNOWN_TOPIC_OR_PART))
    assert _consume(_Message(b"a"), _Message(error=KafkaError(KafkaError._TRANSPORT)), _Message(b"b"),
                    _Message(error=KafkaError(KafkaError._PARTITION_EOF))) == b"a\nb\n"


def test_an_error_the_consumer_cannot_recover_from_stops_it() -> None:
    assert not recovering(KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED))
    assert not recovering(KafkaError(KafkaError._TRANSPORT, fatal=True))
    with pytest.raises(StromError, match=r"Could not consume .t.: .*uthoriz"):
        _consume(_Message(error=KafkaError(KafkaError.TOPIC_AUTHORIZATION_FAILED)))
