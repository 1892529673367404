"""TGI: records (`parser`), the text and JSON line forms (`text_format`, `json_format`), fields (`fields`); imports `parsers` only."""
