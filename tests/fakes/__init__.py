"""Fake platform servers on 127.0.0.1 (Bot API, Slack Web API, Discord REST + gateway).

Each records what it was asked and can be scripted to answer 429 with retry_after, 403, or
drop the connection mid-answer. Tests drive them through the official SDK clients pointed at
them by `api_base`.
"""
