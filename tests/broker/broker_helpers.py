"""Helpers for broker tests: unique names, draining a consumer, waiting for a broker log line."""

from __future__ import annotations

import socket
import time
import uuid

from confluent_kafka import Consumer, Message

from strom.broker import EmbeddedBroker


def unique(prefix: str) -> str:
    return f"{prefix}-{uuid.uuid4().hex[:8]}"


def drain(consumer: Consumer, count: int, timeout: float = 30.0) -> list[Message]:
    """Polls until `count` records arrived (fails on a consumer error or the timeout)."""
    messages: list[Message] = []
    deadline = time.monotonic() + timeout
    while len(messages) < count and time.monotonic() < deadline:
        message = consumer.poll(0.5)
        if message is None:
            continue
        assert message.error() is None, message.error()
        messages.append(message)
    assert len(messages) == count, f"got {len(messages)} of {count} records"
    return messages


def logged(broker: EmbeddedBroker, text: str, timeout: float = 10.0) -> bool:
    """True once the broker's log has a line with `text` (the log says what to do about bad input)."""
    deadline = time.monotonic() + timeout
    while text not in broker.log_path.read_text():
        if time.monotonic() > deadline:
            return False
        time.sleep(0.05)
    return True


def closed_by_broker(sock: socket.socket) -> bool:
    """True if the broker closes the connection within the socket's timeout (10 s if it has none)."""
    if sock.gettimeout() is None:
        sock.settimeout(10)
    try:
        return sock.recv(1) == b""
    except ConnectionResetError:
        return True
    except TimeoutError:
        return False
