"""The agent: one small interface between a drained turn and whatever model answers it."""
