"""Per-platform senders and the registry the delivery task picks them from."""
