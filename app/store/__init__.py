"""Persistence: SQLAlchemy tables, engine/session helpers and repositories.

All SQL in dpicl lives in this package.
"""

from app.store.base import Base
from app.store.db import Database, normalize_url

__all__ = ["Base", "Database", "normalize_url"]
