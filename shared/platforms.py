"""The platforms and chat types hermes knows, by name (the SDK adapters live elsewhere)."""

from __future__ import annotations

CLI = "cli"
TELEGRAM = "telegram"
SLACK = "slack"
DISCORD = "discord"
CRON = "cron"

PLATFORMS = frozenset({CLI, TELEGRAM, SLACK, DISCORD, CRON})

DM = "dm"
GROUP = "group"
CHANNEL = "channel"
THREAD = "thread"

CHAT_TYPES = frozenset({DM, GROUP, CHANNEL, THREAD})

# Sessions made through a gateway get 8 hex digits in their id; terminal (and cron) sessions 6.
GATEWAY_PLATFORMS = frozenset({TELEGRAM, SLACK, DISCORD})
