"""The README, the design document and the notebook: true, and pointing only inside the repository."""
import json
import pathlib
import re

import jax
import numpy as np

ROOT = pathlib.Path(__file__).parents[1]
README = (ROOT / 'README.md').read_text()
DESIGN = (ROOT / 'docs' / 'design.md').read_text()


def test_readme_points_inside_the_repository():
  for missing in ('PERF_NOTES', 'specs/', '../', 'DESIGN.md'):
    assert missing not in README, missing
    assert missing not in DESIGN, missing
  assert 'pip install "fedjax_het[' not in README
  for target in re.findall(r'\]\(([^)#][^)]*)\)', README):
    if not target.startswith('http'):
      assert target == 'docs/design.md' or (ROOT / target).exists(), target
  for path in re.findall(r'`((?:experiments|fedjax_het|notebooks|tests)/[\w/.]+)`', README):
    assert (ROOT / path).exists(), path


def test_the_notebook_installs_the_checkout_without_a_placeholder_url():
  notebook = json.loads((ROOT / 'notebooks' / 'quickstart.ipynb').read_text())
  source = ''.join(''.join(cell['source']) for cell in notebook['cells'])
  assert 'YOUR_ORG' not in source and 'REPO_URL' not in source
  assert '%pip install -q -e "{checkout}"' in source


def test_the_design_documents_example_algorithm_runs_in_under_40_lines():
  """The two-phase, per-client-state example of docs/design.md, as written."""
  example = DESIGN.split('## A new algorithm')[1].split('```python\n')[1].split('```')[0]
  assert len([line for line in example.splitlines() if line.strip()]) < 40
  scope = {}
  exec(compile(example, 'docs/design.md', 'exec'), scope)  # pylint: disable=exec-used
  state, metrics = scope['state'], scope['metrics']
  log_t = np.asarray(state.clients['log_t'])
  trained = np.abs(log_t) > 0
  # 3 rounds of 5 of the 20 clients: the sampled ones learnt a temperature,
  # the others kept their initial one.
  assert 5 <= trained.sum() <= 15
  assert np.all(np.isfinite(metrics['train_loss']))


def test_the_design_documents_example_part_runs_in_under_60_lines():
  """The deadline part of docs/design.md, a new file's worth of part and its
  registration: the infinite deadline is FedAvg bit for bit, a tight one
  drops uploads (fewer bytes up, another model)."""
  example = DESIGN.split('## Parts')[1].split('```python\n')[1].split('```')[0]
  assert len([line for line in example.splitlines() if line.strip()]) < 60
  scope = {}
  exec(compile(example, 'docs/design.md', 'exec'), scope)  # pylint: disable=exec-used
  runs = scope['runs']
  for plain, infinite in zip(jax.tree.leaves(runs['fedavg'][0].params),
                             jax.tree.leaves(runs['infinite'][0].params)):
    np.testing.assert_array_equal(plain, infinite)
  assert (np.sum(runs['tight'][1]['bytes_up']) <
          np.sum(runs['fedavg'][1]['bytes_up']))
  assert not np.array_equal(jax.tree.leaves(runs['tight'][0].params)[0],
                            jax.tree.leaves(runs['fedavg'][0].params)[0])
