"""experiments/bench/privacy_cost.py times what it names: each variant's run holds exactly the
privacy parts of its label, on the same federation and cohort as plain FedAvg."""
import dataclasses
import os

from fedjax_het import run
from fedjax_het.tools import bench
from script_utils import load_script

SMALL = dataclasses.replace(bench.WORKLOADS['W-MLP'], num_clients=8, cohort=4,
                            examples_per_client=4)
PARTS = {'FedAvg': (), 'dp, clip only (S = 1, σ = 0)': ('dp',), 'dp (S = 1, σ = 1)': ('dp',),
         'secagg (b = 16)': ('secagg',), 'dp + secagg': ('dp', 'secagg')}


def test_every_variant_runs_the_parts_it_names_on_plain_fedavgs_cohort(monkeypatch):
  privacy_cost = load_script(os.path.join('experiments', 'bench', 'privacy_cost.py'),
                             monkeypatch)
  assert list(privacy_cost.VARIANTS) == list(PARTS)
  plain = privacy_cost.variant_config(SMALL, {})
  for name, changes in privacy_cost.VARIANTS.items():
    config = privacy_cost.variant_config(SMALL, changes)
    assert (config.clients_per_round, config.num_clients) == (4, 8)
    assert {k: v for k, v in config.items() if k not in ('dp', 'secagg')} == \
        {k: v for k, v in plain.items() if k not in ('dp', 'secagg')}
    _, _, _, method = run.build_experiment(config)
    assert method.parts.names == PARTS[name], name
    if 'dp' in PARTS[name]:
      assert method.parts['dp'].noise_multiplier == (0.0 if 'clip only' in name else 1.0)
      assert method.parts['dp'].clips
