"""The agent's tools: a small registry, and `memory` and `session_search`."""
