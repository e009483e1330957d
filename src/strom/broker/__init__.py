"""strom.broker: a durable single-node broker speaking the Kafka wire protocol."""

from strom.broker.embedded import EmbeddedBroker

__all__ = ["EmbeddedBroker"]
