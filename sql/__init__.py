"""Metric definitions as DuckDB SQL views, one view per file, in layers (staging, metrics,
signals, export) loaded in the order their dependencies give (pipeline/query/views.py)."""
