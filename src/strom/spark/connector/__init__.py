"""The ``"strom"`` Spark data source: Kafka topics as batch and streaming DataFrames (``source``,
``reader``), an exactly-once sink (``sink``), their options (``options``) and the driver's offset
look-ups (``metadata``). ``strom.spark.session()`` registers it; no strom topology is involved."""
