"""strom.broker: a durable single-node broker speaking the Kafka wire protocol."""
