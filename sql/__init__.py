"""Metric definitions as DuckDB SQL views, one view per file, loaded in file-name order."""
