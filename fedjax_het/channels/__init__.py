"""Wireless channels as jitted pure functions (AirComp over-the-air aggregation)."""
from fedjax_het.channels import aircomp
from fedjax_het.channels.aircomp import (AirCompStats, max_min_beamformer,
                                         over_the_air_mean, rayleigh_channels)

__all__ = ['AirCompStats', 'aircomp', 'max_min_beamformer', 'over_the_air_mean',
           'rayleigh_channels']
