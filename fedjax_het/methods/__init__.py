"""Federated methods, each a small bundle of pure functions on the engine."""
from fedjax_het.methods.cos2p.adavit import FedAvgAdavit
from fedjax_het.methods.base import FederatedAlgorithm
from fedjax_het.methods.cos2p.cos2p import Cos2p
from fedjax_het.methods.cos2p.width_baselines import FedAvgFull, FedRolexVit, RamFed
from fedjax_het.methods.cos2p.fedpm import FedPM
from fedjax_het.methods.cos2p.platon import FedAvgPlaton
from fedjax_het.methods.cos2p.prunefl import PruneFL
from fedjax_het.methods.cos2p.qvit import FedAvgQvit
from fedjax_het.methods.fedavg import FedAvg
from fedjax_het.methods.fedacs.fedacs import FEDACS_FAMILY as FEDACS_FAMILY
from fedjax_het.methods.fedacs.fedacs import FedACS
from fedjax_het.methods.fedacs.fedau import FedAU
from fedjax_het.methods.fedacs.fedvarp import FedVarp
from fedjax_het.methods.fedacs.reweighted import CaFedAvg, FedNova, OptimalSampling
from fedjax_het.methods.fedacs.systems_aware import FedAvgHet
from fedjax_het.methods.fiarse.fiarse import Fiarse, FiarseLayerwise, PruningGreedy
from fedjax_het.methods.fiarse.scalefl import ScaleFL
from fedjax_het.methods.hist.hist import HFedAvg, HIST
from fedjax_het.methods.split.split_learning import CseFsl, FslAn
from fedjax_het.methods.split.fsl_baselines import FslMc, FslOc
from fedjax_het.methods.fiarse.width_slicing import FedRolex, FjORD, HeteroFL

ALGORITHMS: dict[str, type[FederatedAlgorithm]] = {
    cls.name: cls for cls in (
        FedAvg, Fiarse, FiarseLayerwise, PruningGreedy, HeteroFL, FedRolex,
        FjORD, ScaleFL, FedAvgHet, FedACS, CaFedAvg, FedVarp, FedNova, FedAU,
        OptimalSampling, HIST, HFedAvg, CseFsl, FslAn, FslMc, FslOc, Cos2p,
        FedAvgFull, FedRolexVit, RamFed, FedPM, PruneFL, FedAvgPlaton,
        FedAvgQvit, FedAvgAdavit)
}


# Every family's config section, once each, in registry order.
OPTION_GROUPS = tuple(dict.fromkeys(
    group for cls in ALGORITHMS.values() for group in cls.option_groups))


def algorithm_class(name: str) -> type[FederatedAlgorithm]:
  """The class of the method called `name`; ValueError naming the choices."""
  if name not in ALGORITHMS:
    raise ValueError(f'unknown algorithm {name!r}; choose one of '
                     f'{", ".join(sorted(ALGORITHMS))}.')
  return ALGORITHMS[name]


def create_algorithm(name: str, config, model, data) -> FederatedAlgorithm:
  """Instantiates the method called `name` for a model and federated data.

  The data are validated first against the model's classes
  (`FederatedData.validate`): a bad label, count or feature is a one-line
  ValueError naming the client and row, not NaNs or wrong results later.
  """
  cls = algorithm_class(name)
  data.validate(model.num_classes)
  return cls(config, model, data)
