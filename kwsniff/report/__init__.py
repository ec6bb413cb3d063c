"""The report side: the report's sections (SQL over the Parquet tables, on DuckDB or Spark) and their plots."""
