"""Placeholder: filled in by the residual-stream blocks (SPEC 2c)."""
