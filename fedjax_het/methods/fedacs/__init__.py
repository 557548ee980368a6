"""FedACS (systems-aware client selection under lossy links and unequal work)
and its baselines: `systems_aware` holds the family's shared round (sampling
with the drawn q and T, the calibrated aggregation); `fedacs`, `fedau`,
`fedvarp` and `reweighted` (c-a-FedAvg, FedNova, optimal sampling) each one
method.
"""
