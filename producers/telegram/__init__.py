"""Telegram: the Bot API webhook and long polling, and the translation of updates to turns."""
