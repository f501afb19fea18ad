"""Static checkers of plans, independent of the planner."""
