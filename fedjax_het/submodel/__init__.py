"""Submodels as mask pytrees over the global parameters."""
from fedjax_het.submodel.disjoint import disjoint_partition
