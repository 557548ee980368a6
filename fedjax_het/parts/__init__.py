"""Parts a method runs under, composed into `FederatedAlgorithm` rather than
inherited: each owns its config section and the round inputs and state it
adds (`parts.clock`: the semi-asynchronous virtual clock)."""
