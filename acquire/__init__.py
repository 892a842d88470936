"""Active label acquisition (CARE): majority-vote pseudo-labels, where a bought label corrects
training most, and the budget ledger that never overspends."""
