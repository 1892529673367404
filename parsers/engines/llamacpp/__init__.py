"""llama.cpp: line anatomy (`parser`), timing blocks (`timing`), the relative clock (`clock`); imports `parsers` only."""

# how the project spells it: the CLI help, the package description and the README read it
SERVER = "llama.cpp"
