"""Spark's Python worker daemon with strom's executor modules imported before it forks workers.

Set as ``spark.python.daemon.module`` by ``strom.spark.session()``: every Python worker is forked
from this process, so each new worker (Spark starts several per application, and again after one
exits) starts with the stream-task runtime, the connector's reader, confluent-kafka, rocksdict and
pyarrow already loaded instead of importing them itself (about a second of CPU per worker).
"""

from pyspark.daemon import manager

if __name__ == "__main__":
    manager()
