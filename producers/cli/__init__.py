"""The `hermes` command line: chat, sessions admin, and the process roles."""
