"""Submodels as mask pytrees over the global parameters."""
