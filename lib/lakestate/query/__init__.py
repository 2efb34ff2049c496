"""Reading the warehouse without a JVM: the DuckDB engine of ``lakestate sql``
(``duckdb_engine``), Spark SQL's dialect and functions on it (``spark_dialect``), and a
query's result as the CLI prints it (``result``)."""
