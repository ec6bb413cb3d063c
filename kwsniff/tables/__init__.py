"""The kwsniff tables: their names (kwsniff.tables.names, no pyarrow) and their Arrow schemas
(kwsniff.tables.schemas), defined in one place (pyiceberg habit)."""

from kwsniff.tables.names import DEFAULT_TABLES, OPT_IN_TABLES, TABLES

__all__ = ["DEFAULT_TABLES", "OPT_IN_TABLES", "TABLES"]
