"""TensorRT-LLM: line anatomy (`parser`), what each record means (`events`, `stats`); imports `parsers` only."""
