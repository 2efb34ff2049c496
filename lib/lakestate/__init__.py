"""lakestate."""
