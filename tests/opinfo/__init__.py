"""Conformance of the tpu device against PyTorch's OpInfo database (see README.md)."""
