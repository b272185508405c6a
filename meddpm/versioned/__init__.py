"""The versioned-JSON loader: one reader for every JSON file meddpm reads back (see :mod:`.loader`).

A harness room below every other one: it imports only the plumbing (``meddpm.errors``), so the measuring rooms,
the parity room, the judge and the history all read their files through it.
"""
