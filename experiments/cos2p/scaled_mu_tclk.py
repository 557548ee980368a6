"""Co-S²P's μ and T_clk (Fig. 6), scaled: the same setting as scaled_digits.py.

Command:   fedjax-het --config experiments/cos2p/scaled_mu_tclk.py --workdir runs/cos2p/mu_tclk --seeds 3
Paper:     Fig. 6 (E1): raising μ or T_clk raises server and client accuracy and lowers RU (no
           numbers in the text).
Setting:   scaled_digits.py's (E1's client mix on digits, equal virtual time per run); μ ∈ {0.25,
           0.5, 0.75, 1} at T_clk = 60 s, and T_clk ∈ {0, 60, 120} s at μ = 0.5 (μ = 0.5, T_clk =
           60 s is scaled_digits.py's cos2p run, μ = 1, T_clk = 0 its cos2p_sync).
"""
from cos2p_setup import COLUMNS, scaled_config, with_time_budget

TITLE = 'Co-S²P, μ and T_clk (scaled)'
CURVES = ('virtual_seconds',)
SWEEP = [(mu, 60.0) for mu in (0.25, 0.5, 0.75, 1.0)] + [
    (0.5, t_clk) for t_clk in (0.0, 120.0)]


def get_configs():
  configs = {}
  for mu, t_clk in SWEEP:
    config = scaled_config()
    config.algorithm = 'cos2p'
    config.clock.update(mu=mu, t_clk=t_clk)
    configs[f'mu={mu:g},t_clk={t_clk:g}'] = with_time_budget(config)
  return configs
