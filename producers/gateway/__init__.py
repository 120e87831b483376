"""The receivers' shared HTTP app and process: one ASGI app, recording turns off the event loop."""
