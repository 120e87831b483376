"""Alembic environment: runs only on a connection handed in by shared.db.migrate."""

from alembic import context

from shared.db.schema import metadata

connection = context.config.attributes.get("connection")
if connection is None:
    raise RuntimeError("hermes migrations run through `hermes db upgrade`, not the alembic CLI")

context.configure(connection=connection, target_metadata=metadata, render_as_batch=True)
with context.begin_transaction():
    context.run_migrations()
