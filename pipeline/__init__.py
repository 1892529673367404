"""The pipeline: ingest, tail, store and query."""
