"""strom.kafka: the one place that builds confluent-kafka clients, plus shared serdes."""
