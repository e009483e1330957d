"""Interactive queries on Spark, answered where the state lives: each Python worker serves its stream
threads' stores (``server``), the driver routes a request to the workers that hold the partitions
(``router``), offers the IQv1 views on top (``views``) and an HTTP face (``http``)."""
