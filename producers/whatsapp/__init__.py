"""WhatsApp: the Cloud API webhook (verification handshake, signed posts) and its translation."""
