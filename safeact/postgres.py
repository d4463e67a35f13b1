"""The PostgreSQL ledger, for fleets: ``pip install "safeact[postgres]"``.

``get_store("postgresql://...")`` opens one too; import this module to pass settings of its
own (``pool_size``), to create the schema from Python, or to read ``CONNECT_TIMEOUT``, the
seconds a new connection waits for the server when neither the caller nor the connection
string says.
"""

from safeact._postgres import CONNECT_TIMEOUT, PostgresStore, migrate_postgres

__all__ = ["CONNECT_TIMEOUT", "PostgresStore", "migrate_postgres"]
