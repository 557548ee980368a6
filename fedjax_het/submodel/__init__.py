"""Submodels as mask pytrees over the global parameters.

- `tcb_mask`: FIARSE's hard magnitude mask with the TCB-GD gradient (Eq. 3).
- `magnitude`: top-k thresholds per capacity (model-, layer-, shard-wise).
- `width`: channel windows of width methods (HeteroFL, FedRolex, FjORD).
- `disjoint_partition`: HIST's disjoint per-cell partitions.
"""
from fedjax_het.submodel import magnitude, width
from fedjax_het.submodel.disjoint import disjoint_partition
from fedjax_het.submodel.tcb import tcb_mask

__all__ = ['disjoint_partition', 'magnitude', 'tcb_mask', 'width']
