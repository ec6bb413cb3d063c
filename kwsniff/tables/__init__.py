"""Arrow schemas of the kwsniff tables, defined in one place (pyiceberg habit)."""

from kwsniff.tables.schemas import SCHEMAS, TABLES

__all__ = ["SCHEMAS", "TABLES"]
