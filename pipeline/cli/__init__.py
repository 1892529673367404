"""The `servelens` command: a thin typer app over the library, one module per command.

`app.build_app()` gives the whole app; `options` holds what several commands share. May import
everything below it (`pipeline.*`, `parsers`, and `dashboards` to start the dashboard).
"""
