"""Slack: the Events API (and Socket Mode), signatures, and the translation of events to turns."""
