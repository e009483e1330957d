"""Configs changed at run time with (Incremental)AlterConfigs: the broker's dynamic configs (Kafka's
per-broker and cluster-default layers) and group configs.

They are kept in ``<data dir>/dynamic-configs.json`` (readable by the broker's user only: a listener's
key password is among them, as in Kafka's metadata log) and applied again at start, as Kafka keeps them
in its metadata log. A broker config change applies at once: topics without their own value of a
``log.*`` default take the new one at their next append, roll or retention pass; a listener whose
keystore or truststore is set (even to the same path: the file is read again) gives new connections
the new certificate once it has loaded and matches the one in use.

Group configs are KIP-848's (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``):
stored and described as Kafka does, within Kafka's bounds; they govern groups of the consumer protocol,
which strom broker does not serve, so its classic groups keep the session timeouts their members ask for.
"""

from __future__ import annotations

import json
import os
from collections.abc import Iterable, Mapping
from pathlib import Path
from typing import Any

from strom.broker.config import (
    CLUSTER_DEFAULT,
    LISTENER_PREFIX,
    PER_BROKER,
    BrokerConfig,
    parse_group_configs,
    render,
)
from strom.broker.log.manager import LogManager
from strom.broker.security.tls import ListenerTls
from strom.errors import BrokerStartError

FILE_NAME = "dynamic-configs.json"


def load_saved(data_dir: Path, config: BrokerConfig) -> dict[str, dict[str, int]]:
    """Puts the broker configs kept in ``<data_dir>/dynamic-configs.json`` (if any) into ``config``, over its
    static ones, and returns the group configs kept there. Reads only: the data directory is not created nor
    locked yet, so the listeners can be bound with the configs they will serve before anything is written."""
    path = data_dir / FILE_NAME
    if not path.exists():
        return {}
    try:
        saved = json.loads(path.read_text())
        for layer in (PER_BROKER, CLUSTER_DEFAULT):
            config.set_dynamic(layer, saved["broker"][layer])
        return {group: parse_group_configs(configs) for group, configs in saved["groups"].items()}
    except (OSError, ValueError, KeyError, TypeError, AttributeError) as exc:
        reason = (os.strerror(exc.errno or 0) if isinstance(exc, OSError)
                  else f"it has no {exc}" if isinstance(exc, KeyError) else str(exc).rstrip("."))
        raise BrokerStartError(
            f"Cannot read {path} ({reason}): it keeps the configs changed at run time. Put back a good copy, "
            "or remove it to start with the static config only (the run-time changes are lost).") from None


class DynamicConfigs:
    """The run-time configs of one broker, persisted in its data directory: ``config``'s dynamic layers and
    the ``groups`` as load_saved found them, and ``tls``, the TLS context each listener gives new
    connections."""

    def __init__(self, data_dir: Path, config: BrokerConfig, logs: LogManager,
                 groups: dict[str, dict[str, int]], tls: ListenerTls) -> None:
        self._path = data_dir / FILE_NAME
        self._config = config
        self._logs = logs
        self.groups = groups
        self.tls = tls

    def alter_broker(self, layer: str, configs: Mapping[str, Any], validate_only: bool,
                     named: Iterable[str] = ()) -> None:
        """Replaces a layer's dynamic configs (ValueError: nothing changes). A listener whose TLS keys
        change or are ``named`` (set again, to the same file) reads its keystore and truststore again;
        KeystoreRefused if they do not load or the certificate does not match the one in use."""
        before = self._config.dynamic[layer]
        self._config.set_dynamic(layer, configs)
        try:
            changed = {k for k in {*before, *self._config.dynamic[layer]}
                       if before.get(k) != self._config.dynamic[layer].get(k)}
            use = self.tls.reload(self.tls.listeners(k for k in {*changed, *named}
                                                     if k.startswith(LISTENER_PREFIX)))
        except BaseException:
            self._config.dynamic[layer] = before
            raise
        if validate_only:
            self._config.dynamic[layer] = before
            return
        use()
        self._save()
        self._logs.refresh_topic_defaults()

    def alter_group(self, group: str, configs: Mapping[str, Any], validate_only: bool) -> None:
        """Replaces a group's configs (ValueError: nothing changes)."""
        parsed = parse_group_configs(configs)
        if validate_only:
            return
        if parsed:
            self.groups[group] = parsed
        else:
            self.groups.pop(group, None)
        self._save()

    def _save(self) -> None:
        saved = {"broker": {layer: {k: render(v) for k, v in self._config.dynamic[layer].items()}
                            for layer in (PER_BROKER, CLUSTER_DEFAULT)},
                 "groups": self.groups}
        temporary = self._path.with_suffix(".tmp")
        with os.fdopen(os.open(temporary, os.O_WRONLY | os.O_CREAT | os.O_TRUNC, 0o600), "w") as file:
            file.write(json.dumps(saved))
        temporary.replace(self._path)
