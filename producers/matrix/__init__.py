"""Matrix receiver: the `/sync` long poll (matrix-nio)."""
