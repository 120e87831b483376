"""Search on SQLite: FTS5 tables and triggers (ddl), query compiling, hit and row reads."""
