"""Parts: kinds of heterogeneity a method runs under, composed into its round
(`core.parts`: a `Part` with hooks, chained by `compose`), not inherited from
another method. Each owns its config section and the round inputs and state
it adds: `parts.links_work`, lossy uplinks and unequal local work
(`config.systems`), with `parts.local_work`'s accumulation norms of a
solver's steps; `parts.availability`, which clients are online
(`systems.availability`); `parts.clock`, the semi-asynchronous virtual clock
(`config.clock`); `parts.cells`, cells with edge rounds and the OMA or AirComp
edge channel (`config.hierarchy`); `parts.dp`, DP-FedAvg's clipping and
Gaussian noise on the cohort sum (`config.dp`); `parts.secagg`, secure
aggregation's fixed-point sums modulo 2^b (`config.secagg`), after dp: the
update is clipped before it is encoded, the noise added before the decode.

A part runs under every method that lists its section (`option_groups`),
once registered here (`core.parts.register`), in the order it acts."""
from fedjax_het.core.parts import register
from fedjax_het.parts import (availability, cells, clock, dp, links_work,
                              secagg)

register(links_work.SystemsOptions, links_work.LinksWork)
register(links_work.SystemsOptions, availability.OnlineClients)
register(clock.ClockOptions, clock.OnClock)
register(cells.HierarchyOptions, cells.Cells)
register(dp.DPOptions, dp.ClipAndNoise)
register(secagg.SecaggOptions, secagg.SecureSum)
