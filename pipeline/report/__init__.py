"""Reports: what a store says, gathered once and rendered as text, Markdown, HTML or JSON.

The summary, the queueing and calibration sections, charts, a request's whole story, and
escaping of log text for Markdown. May import `pipeline.query`, `pipeline.store`,
`pipeline.sources` and `parsers`.
"""
