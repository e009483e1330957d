"""Configs changed at run time with (Incremental)AlterConfigs: the broker's dynamic configs (Kafka's
per-broker and cluster-default layers) and group configs.

They are kept in ``<data dir>/dynamic-configs.json`` and applied again at start, as Kafka keeps them
in its metadata log. A broker config change applies at once: topics without their own value of a
``log.*`` default take the new one at their next append, roll or retention pass.

Group configs are KIP-848's (``consumer.session.timeout.ms``, ``consumer.heartbeat.interval.ms``):
stored and described as Kafka does, within Kafka's bounds; they govern groups of the consumer protocol,
which strom broker does not serve, so its classic groups keep the session timeouts their members ask for.
"""

from __future__ import annotations

import json
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from strom.broker.config import CLUSTER_DEFAULT, PER_BROKER, BrokerConfig, parse_group_configs, render
from strom.broker.log.manager import LogManager


class DynamicConfigs:
    """The run-time configs of one broker, persisted in its data directory."""

    def __init__(self, data_dir: Path, config: BrokerConfig, logs: LogManager) -> None:
        self._path = data_dir / "dynamic-configs.json"
        self._config = config
        self._logs = logs
        self.groups: dict[str, dict[str, int]] = {}
        if self._path.exists():
            saved = json.loads(self._path.read_text())
            for layer in (PER_BROKER, CLUSTER_DEFAULT):
                config.set_dynamic(layer, saved["broker"][layer])
            self.groups = {group: parse_group_configs(configs) for group, configs in saved["groups"].items()}
            logs.refresh_topic_defaults()

    def alter_broker(self, layer: str, configs: Mapping[str, Any], validate_only: bool) -> None:
        """Replaces a layer's dynamic configs (ValueError: nothing changes)."""
        self._config.set_dynamic(layer, configs, validate_only)
        if not validate_only:
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
        temporary.write_text(json.dumps(saved))
        temporary.replace(self._path)
