"""State stores, the record cache and changelogging for strom.streams (Kafka Streams' state layer)."""
