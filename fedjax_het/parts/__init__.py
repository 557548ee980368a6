"""Parts: kinds of heterogeneity a method runs under, composed into it (held
as an object its hooks delegate to), not inherited from another method. Each
owns its config section and the round inputs and state it adds:
`parts.clock`, the semi-asynchronous virtual clock; `parts.cells`, cells with
edge rounds and the OMA or AirComp edge channel."""
