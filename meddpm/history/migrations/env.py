"""Alembic's environment: migrations run on the connection the store hands over, inside its transaction.

The store holds a lock for that transaction (PostgreSQL's advisory lock, SQLite's write lock), so two
runners opening a new database at once migrate it once.
"""

from alembic import context

from meddpm.history.models import Base

connection = context.config.attributes["connection"]
# Batch mode: SQLite cannot ALTER most things, so a later revision's changes are done by copying the table.
context.configure(
    connection=connection,
    target_metadata=Base.metadata,
    render_as_batch=connection.dialect.name == "sqlite",
)
with context.begin_transaction():
    context.run_migrations()
