"""Reading a store with SQL: connections over its parts (local, remote, a fleet), the views of
sql/ and their stored rollups, time ranges, the sandbox and bounds for user SQL, results.

May import `pipeline.store`, `pipeline.sources` and `parsers.schema`.
"""
