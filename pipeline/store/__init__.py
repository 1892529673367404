"""The store: Hive-partitioned Parquet parts of events and samples under one manifest.

Its layout, the manifest and its commit protocol, part checksums, remote mirrors, compaction,
retention, repair. May import `pipeline.sources`, `pipeline.outfile` and `parsers.schema`.
"""
