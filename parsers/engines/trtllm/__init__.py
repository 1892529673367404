"""TensorRT-LLM: line anatomy (`parser`), what each record means (`events`, `stats`); imports `parsers` only."""

# how the project spells it: the CLI help, the package description and the README read it
SERVER = "TensorRT-LLM"
