"""Tools beside the trainer, never imported by a training run: `tools.bench`
(`fedjax-het bench`, seconds per round of fixed workloads)."""
