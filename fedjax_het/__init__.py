"""fedjax_het: heterogeneous federated learning in JAX."""
