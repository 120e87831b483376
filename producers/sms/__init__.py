"""SMS through Twilio: the signed webhook and the translation of its form posts to turns."""
