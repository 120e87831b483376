"""The embedded stack: what `hermes up` starts on one machine with nothing installed."""
