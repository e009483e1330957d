"""strom.spark: Kafka source and sink for PySpark, and the runtime that runs topologies on Spark."""
