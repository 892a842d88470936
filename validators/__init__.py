"""Validation layers (schema, rules, model-based judges, dataset-level checks) and the runner
that chains them. Every check returns a verdict with a reason code; rejects are kept.
"""
