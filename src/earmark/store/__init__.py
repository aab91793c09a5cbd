"""The only code that speaks SQL: pool, migrations, transactions, group admission, sweeper."""

from earmark.store.store import Store, StoreObserver

__all__ = ["Store", "StoreObserver"]
