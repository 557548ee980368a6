"""Host-side system models: latency (HIST's OMA and AirComp uploads), partition
sizing, the virtual clock's event simulation (`systems.clock`, which
`parts.clock` turns into round inputs), FedBuff's buffered asynchronous one
(`buffered`), FedScale's device traces (`traces`) and the ViT cost model
(`vit_cost`).
The parts a method runs under live in `fedjax_het.parts`."""
from fedjax_het.systems import latency, partition_sizing
from fedjax_het.systems.latency import aircomp_upload_time

__all__ = ['aircomp_upload_time', 'latency', 'partition_sizing']
