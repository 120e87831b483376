"""PostgreSQL search backend: words in a tsvector, substrings in a character-gram index."""
