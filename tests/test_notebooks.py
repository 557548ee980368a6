"""Every notebook in notebooks/ executes top to bottom without error."""
import pathlib

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[1] / 'notebooks').glob('*.ipynb'))


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path):
  notebook = nbformat.read(path, as_version=4)
  client = nbclient.NotebookClient(notebook, timeout=600, kernel_name='python3',
                                   resources={'metadata': {'path': str(tmp_path)}})
  client.execute()


def test_there_is_a_notebook():
  assert NOTEBOOKS
