"""Serving the derived metrics: the exporter's snapshot, its HTTP server, exposition files, top.

May import `pipeline.query`, `pipeline.store` and `pipeline.sources`.
"""
