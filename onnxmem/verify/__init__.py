"""Verification of a plan as the CLI runs it: identity, proof, execution, report."""
