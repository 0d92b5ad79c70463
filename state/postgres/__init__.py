"""The Postgres state: a batch's rows copied into a table, with its batch id, in one transaction.

:mod:`~state.postgres.sink` copies the rows into the table :mod:`~state.postgres.config`
names (made and checked by :mod:`~state.postgres.table`); :mod:`~state.postgres.batches` is
the batch table (``sqe_batches``) that records each consumer's last batch under a row
lock; :mod:`~state.postgres.ddl` creates tables once, under an advisory lock.

May import: what :mod:`state` may, and psycopg.
"""
