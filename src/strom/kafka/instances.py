"""The instances of a running strom application, as the brokers see them.

A strom application's stream tasks read with ``assign()`` and commit as group ``application.id``, so
that group never has members (Kafka's commit rules forbid a member-less commit to a group with
members). So each running driver also joins group ``<application.id>.instances`` (``instances_group``)
and heartbeats there while it runs: the brokers see the application alive, a killed driver drops out
after ``SESSION_TIMEOUT_MS``, and any machine can ask (``strom groups list|describe``, and
``strom streams reset`` refuses a running application). The member's client id says where it runs.
The last instance to stop cleanly deletes the group; one killed leaves it empty (no offsets), and the
brokers drop it at their next offsets-expiry pass, as Kafka does with any empty group without offsets.

librdkafka joins a group only for a subscription that matches a topic, so the instance subscribes to
one of the application's source topics and assigns itself nothing: it never fetches.
"""

from __future__ import annotations

import logging
import os
import socket
import threading
from collections.abc import Mapping
from typing import Any

from confluent_kafka import Consumer, KafkaException

from strom.kafka import clients

__all__ = ["INSTANCES_SUFFIX", "SESSION_TIMEOUT_MS", "ApplicationInstance", "application_of",
           "instances_group"]

log = logging.getLogger(__name__)

INSTANCES_SUFFIX = ".instances"
SESSION_TIMEOUT_MS = 10_000
"""A driver killed without leaving stays listed this long (librdkafka's default is 45 s)."""
_POLL_S = 1.0
_DELETE_TIMEOUT_S = 5.0


def instances_group(application_id: str) -> str:
    return f"{application_id}{INSTANCES_SUFFIX}"


def application_of(group: str) -> str | None:
    """The application id whose instances group this is, or None."""
    return group[:-len(INSTANCES_SUFFIX)] if group.endswith(INSTANCES_SUFFIX) else None


class ApplicationInstance:
    """This driver's membership in ``<application.id>.instances`` until ``close()``; ``where`` (e.g. the
    Spark master) goes into the member's client id beside the host name and process id."""

    def __init__(self, bootstrap_servers: str, application_id: str, topic: str, where: str,
                 settings: Mapping[str, Any] | None = None,
                 admin_settings: Mapping[str, Any] | None = None) -> None:
        self._group = instances_group(application_id)
        self._bootstrap_servers = bootstrap_servers
        self._admin_settings = dict(admin_settings or {})
        client_id = f"strom {application_id} driver on {socket.gethostname()} pid {os.getpid()}, {where}"
        self._consumer: Consumer = clients.consumer(bootstrap_servers, self._group, **{
            **(settings or {}), "client.id": client_id, "session.timeout.ms": SESSION_TIMEOUT_MS,
            "heartbeat.interval.ms": SESSION_TIMEOUT_MS // 5, "group.protocol": "classic",
            "allow.auto.create.topics": False})
        self._consumer.subscribe([topic], on_assign=lambda consumer, _: consumer.assign([]))
        self._closed = threading.Event()
        self._thread = threading.Thread(target=self._poll, name=f"strom-instance-{application_id}",
                                        daemon=True)
        self._thread.start()

    def _poll(self) -> None:
        """Serves the group's rebalances (librdkafka heartbeats on its own threads)."""
        warned = False
        while not self._closed.is_set():
            try:
                event = self._consumer.poll(_POLL_S)
                error = event.error() if event is not None else None
            except Exception as exc:  # the membership only informs; it never stops the application
                error = exc
                self._closed.wait(_POLL_S)
            if error is not None and not warned:
                warned = True
                log.warning("This instance could not join group %s, so the brokers do not list the "
                            "application as running (%s); it runs on.",
                            self._group, error)

    def close(self) -> None:
        """Leaves the group at once (the application is no longer listed as running), and deletes it
        unless another instance is still in it."""
        if self._closed.is_set():
            return
        self._closed.set()
        self._thread.join()
        self._consumer.close()
        self._delete_group()

    def _delete_group(self) -> None:
        admin = clients.admin(self._bootstrap_servers, **self._admin_settings)
        try:
            deleted = admin.delete_consumer_groups([self._group], request_timeout=_DELETE_TIMEOUT_S)
            deleted[self._group].result()
        except KafkaException as exc:  # GROUP_NOT_EMPTY: another instance runs; or no Delete ACL on it
            log.debug("Group %s stays (%s); the brokers drop it once empty at their offsets-expiry pass",
                      self._group, exc.args[0])
