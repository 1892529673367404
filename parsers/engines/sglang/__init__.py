"""SGLang: line anatomy (`parser`), what each message says (`fields`, `other`); imports `parsers` only."""
