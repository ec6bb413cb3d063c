"""The fleet pipeline on Spark (`kwsniff spark`): captures decoded in executors by the same core.

Only :mod:`kwsniff.spark.pipeline` imports pyspark, and only when called; :mod:`kwsniff.spark.tasks`
(what runs in the executors) imports nothing of Spark.
"""
