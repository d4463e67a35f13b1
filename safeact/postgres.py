"""The PostgreSQL ledger, for fleets: ``pip install "safeact[postgres]"``.

``get_store("postgresql://...")`` opens one too; import this module to pass settings of its
own (``pool_size``) or to create the schema from Python.
"""

from safeact._postgres import PostgresStore, migrate_postgres

__all__ = ["PostgresStore", "migrate_postgres"]
