"""strom.streams: the Kafka Streams programming model and runtime."""
