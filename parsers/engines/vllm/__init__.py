"""vLLM: line anatomy (`parser`), what each message says (`fields`); imports `parsers` only."""

# how the project spells it: the CLI help, the package description and the README read it
SERVER = "vLLM"
