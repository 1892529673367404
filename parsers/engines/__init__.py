"""One folder per inference engine: its parser, its fields and its availability rows; each
imports only the shared parser pieces in `parsers/` (never `pipeline`, never another engine)."""
