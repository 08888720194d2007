"""The privacy budget ledger: charge before release, refund on failure, compose across answers."""

from app.budget.composition import BudgetState, Charge, compose
from app.budget.ledger import BudgetExhausted, Ledger, LedgerConflict

__all__ = ["BudgetState", "Charge", "compose", "BudgetExhausted", "Ledger", "LedgerConflict"]
