"""Analyses of a view: lifetimes, liveness, aliasing and in-place rules, happens-before."""
