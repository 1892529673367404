"""Sources: which files to read, whose they are, what they hold, where reading stopped.

Discovery, instance naming, content fingerprints, checkpoints, the block reader that cuts bytes
into lines and parsed chunks, and the readers of /metrics exposition text. May import `parsers`
and `pipeline.outfile`; nothing else of `pipeline`.
"""
