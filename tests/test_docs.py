"""The README and the notebook point only at things a user of a checkout has."""
import json
import pathlib
import re

ROOT = pathlib.Path(__file__).parents[1]
README = (ROOT / 'README.md').read_text()


def test_readme_points_inside_the_repository():
  for missing in ('PERF_NOTES', 'specs/', '../', 'DESIGN.md'):
    assert missing not in README, missing
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
  assert "'install', '-q', '-e', str(checkout)" in source
