"""FIARSE (Wu et al., NeurIPS 2024) and the submodel methods it compares with.

`submodels` is the shared submodel machinery (capacity levels, masked rounds,
per-capacity evaluation); `fiarse` the importance-aware submodels (TCB-GD,
Eq. (3)) with its layer-wise and pruning-greedy variants; `width_slicing`
HeteroFL, FedRolex and FjORD; `scalefl` ScaleFL's depth-and-width submodels
with early exits.
"""
