"""The report side: analytics over the Parquet tables, and the plots drawn from them."""
