"""TGI: records (`parser`), the text and JSON line forms (`text_format`, `json_format`), fields (`fields`); imports `parsers` only."""

# how the project spells it: the CLI help, the package description and the README read it
SERVER = "TGI"
