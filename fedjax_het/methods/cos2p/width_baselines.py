"""The width baselines of Co-S²P's tables on the ViT engine
(`vit_engine.VitOnClock`), synchronous by default (μ = 1, T_clk = 0, the
clock's defaults; `clock.mu` < 1 runs them semi-asynchronously) and averaging
every entry over the clients holding it; they differ only in the fixed
width rule (`cos2p.width_masks`) and the depth:

- FedAvg (Full) (`vit_fedavg`): every client trains the whole ViT
  (budgets read as 1);
- FedRolex (Alam et al. 2022; `vit_fedrolex`): full depth, the heads and
  rows {(q + j) mod U : j < ⌈β·U⌉} at β = R_w = √R_n (our reading; the spec
  leaves β = √R_n or R_n open);
- RAM-Fed (Wang et al. 2023, as the spec reads it; `ram_fed`): full depth, a
  fresh random ⌈β·U⌉ of the heads and rows of every layer per client and
  round at β = R_w.
"""
from fedjax_het.methods.cos2p.vit_engine import WITHOUT_COS2P, \
    VitOnClock


class FedAvgFull(VitOnClock):
  """FedAvg (Full) on the clock: every client trains the whole ViT each
  round (synchronous by default) and the server averages them
  (`aggregation_weights`)."""
  name = 'vit_fedavg'
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'full'}


class FedRolexVit(VitOnClock):
  """FedRolex's rolling heads and rows at full depth (module docstring)."""
  name = 'vit_fedrolex'
  full_depth = True
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'rolling'}


class RamFed(VitOnClock):
  """RAM-Fed's random heads and rows at full depth (module docstring)."""
  name = 'ram_fed'
  full_depth = True
  fixed_options = {**WITHOUT_COS2P, 'cos2p.width_masks': 'random'}
