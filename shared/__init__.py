"""The core of hermes-fleet: settings, records, ids, titles and the store. No I/O at import."""

__version__ = "0.1.0"
