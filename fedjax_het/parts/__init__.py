"""Parts: kinds of heterogeneity a method runs under, composed into it (held
as an object its hooks delegate to), not inherited from another method. Each
owns its config section and the round inputs and state it adds:
`parts.availability`, which clients are online (`systems.availability`);
`parts.links_work`, lossy uplinks and unequal local work (`config.systems`),
with `parts.local_work`'s accumulation norms of a solver's steps;
`parts.clock`, the semi-asynchronous virtual clock (`config.clock`);
`parts.cells`, cells with edge rounds and the OMA or AirComp edge channel
(`config.hierarchy`)."""
