"""Thin Celery tasks: decode arguments, call the worker function, map errors to retries."""
