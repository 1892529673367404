"""vLLM: line anatomy (`parser`), what each message says (`fields`); imports `parsers` only."""
