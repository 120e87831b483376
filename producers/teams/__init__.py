"""Microsoft Teams receiver: Bot Framework activities in, turns out."""
