"""Following live log directories: watching, file identity across rotation, the tailer.

May import `pipeline.sources`, `pipeline.store`, `pipeline.query` (rollup refresh),
`pipeline.outfile` and `parsers`.
"""
