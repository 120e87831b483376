"""Conversations: sessions, messages, titles, resume, memory, chats, import/export, prune."""
