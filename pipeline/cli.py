"""The `servelens` command: a thin typer app over the pipeline library.

Each command parses its options, calls one library function and formats the result. User
errors become one line on stderr and a non-zero exit, never a traceback. Commands that live in
their own module register themselves through `register(app)` (see COMMAND_MODULES).
"""

from __future__ import annotations

import importlib

import typer

app = typer.Typer(
    name="servelens",
    help=(
        "Log ingestion and observability analytics for LLM inference servers "
        "(vLLM, TGI, TensorRT-LLM).\n\n"
        "Example:\n\n"
        "  servelens ingest sample_logs/ && servelens sql \"select event, count(*) from events group by all\""
    ),
    no_args_is_help=True,
    add_completion=False,
    rich_markup_mode=None,
    pretty_exceptions_enable=False,
)

# Modules under servelens.pipeline that define `register(app)`.
COMMAND_MODULES: tuple[str, ...] = ()


def _register_commands() -> None:
    for name in COMMAND_MODULES:
        importlib.import_module(f"servelens.pipeline.{name}").register(app)


def main() -> None:
    _register_commands()
    app()
