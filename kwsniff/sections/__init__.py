"""The report's sections: SQL over the Parquet tables, run on DuckDB or Spark, and their outputs.

`kwsniff report` (kwsniff.commands.report) and the Python API's ``kwsniff.report``
(kwsniff.api.reporting) both answer with these modules; the package is not named after the verb, so
``kwsniff.report`` is only ever that function.
"""
