"""Arrow schemas of the kwsniff tables, defined in one place (pyiceberg habit)."""

from kwsniff.tables.schemas import DEFAULT_TABLES, OPT_IN_TABLES, SCHEMAS, TABLES

__all__ = ["DEFAULT_TABLES", "OPT_IN_TABLES", "SCHEMAS", "TABLES"]
