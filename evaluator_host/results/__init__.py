"""Pure functions over results: normalization of returned values and aggregation (no I/O)."""
