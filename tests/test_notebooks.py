"""Every notebook in notebooks/ executes top to bottom without error.

Notebooks run in a temporary directory with FEDJAX_HET_NOTEBOOK_TINY=1, which they read to
shrink their experiments to a few rounds (the kernel is a subprocess: it inherits os.environ).
"""
import pathlib

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[1] / 'notebooks').glob('*.ipynb'))


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv('FEDJAX_HET_NOTEBOOK_TINY', '1')
  monkeypatch.setenv('TMPDIR', str(tmp_path))  # the notebook's tempfile.mkdtemp() workdirs
  monkeypatch.chdir(tmp_path)
  notebook = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(notebook, timeout=600, kernel_name='python3',
                                   resources={'metadata': {'path': str(tmp_path)}})
  client.execute()


def test_there_is_a_notebook():
  assert NOTEBOOKS
