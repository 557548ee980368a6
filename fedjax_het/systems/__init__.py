"""System heterogeneity: link reliability, local work, latency models, clocks."""
from fedjax_het.systems import latency, partition_sizing
from fedjax_het.systems.latency import aircomp_upload_time

__all__ = ['aircomp_upload_time', 'latency', 'partition_sizing']
