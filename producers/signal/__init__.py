"""Signal's receiver: polls signal-cli-rest-api for the account's envelopes."""
