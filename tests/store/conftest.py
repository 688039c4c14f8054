"""The throwaway PostgreSQL server (tests/store/pg.py) for every test of the stores."""

from tests.store.pg import pg_dsn, pg_server

__all__ = ["pg_dsn", "pg_server"]
