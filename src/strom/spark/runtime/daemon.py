"""Spark's Python worker daemon with strom's executor modules imported before it forks workers.

Set as ``spark.python.daemon.module`` by ``strom.spark.session()``: every Python worker is forked
from this process, so each new worker (Spark starts several per application, and again after one
exits) starts with the stream-task runtime, the connector's reader, confluent-kafka, rocksdict and
pyarrow already loaded instead of importing them itself (about a second of CPU per worker).
``STROM_WORKER_LOG_LEVEL`` in its environment sets the workers' logging (``strom.spark.startup``).
"""

from pyspark.daemon import manager

from strom.spark.startup import configure_worker_logging

if __name__ == "__main__":
    configure_worker_logging()
    manager()
