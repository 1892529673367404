"""llama.cpp: line anatomy (`parser`), timing blocks (`timing`), the relative clock (`clock`); imports `parsers` only."""
