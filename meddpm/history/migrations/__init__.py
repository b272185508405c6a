"""Alembic migrations of the history database (run by :mod:`meddpm.history.store`, never by hand)."""
