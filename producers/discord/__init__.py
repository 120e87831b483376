"""Discord: the gateway client, and the translation of MESSAGE_CREATE to turns."""
