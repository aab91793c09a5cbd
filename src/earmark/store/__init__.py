"""The only code that speaks SQL: pools, migrations, transactions, group admission, sweeper,
and the operator's listings; the interface its callers take (interface.py) and its model in
memory (model.py)."""

from earmark.store.interface import AdminStore, Cycles, Holds, Meter, PlanMarks, Upkeep
from earmark.store.model import Model
from earmark.store.store import Store, StoreObserver

__all__ = [
    "AdminStore",
    "Cycles",
    "Holds",
    "Meter",
    "Model",
    "PlanMarks",
    "Store",
    "StoreObserver",
    "Upkeep",
]
