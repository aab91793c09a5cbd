"""The only code that speaks SQL: pools, migrations, transactions, group admission, sweeper,
and the operator's listings."""

from earmark.store.store import Store, StoreObserver

__all__ = ["Store", "StoreObserver"]
