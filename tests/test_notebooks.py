"""Every notebook in notebooks/ executes top to bottom without error, as written.

Only the notebook's own knobs change: the values in `PARAMETERS` are injected after its cell
tagged `parameters`, as papermill's `-p NAME VALUE` does (a quick look instead of the full
rounds). Notebooks run in a temporary directory; the kernel is a subprocess that inherits
os.environ (the test session's compiler flags and compilation cache).
"""
import pathlib

import nbclient
import nbformat
import pytest

NOTEBOOKS = sorted((pathlib.Path(__file__).parents[1] / 'notebooks').glob('*.ipynb'))
# Every notebook's parameters cell sets ROUNDS, the rounds each of its runs trains.
PARAMETERS = {'ROUNDS': 4}


def inject_parameters(notebook, parameters: dict):
  """`notebook` with a cell assigning `parameters` after its cell tagged
  `parameters` (papermill's injected-parameters cell)."""
  [index] = [i for i, cell in enumerate(notebook.cells)
             if 'parameters' in cell.metadata.get('tags', ())]
  source = '\n'.join(f'{name} = {value!r}' for name, value in parameters.items())
  notebook.cells.insert(index + 1, nbformat.v4.new_code_cell(
      source, metadata={'tags': ['injected-parameters']}))
  return notebook


@pytest.mark.parametrize('path', NOTEBOOKS, ids=lambda p: p.name)
def test_notebook_runs(path, tmp_path, monkeypatch):
  monkeypatch.setenv('TMPDIR', str(tmp_path))  # the notebook's tempfile.mkdtemp() workdirs
  monkeypatch.chdir(tmp_path)
  notebook = inject_parameters(nbformat.read(path, as_version=4), PARAMETERS)
  client = nbclient.NotebookClient(notebook, timeout=600, kernel_name='python3',
                                   resources={'metadata': {'path': str(tmp_path)}})
  client.execute()


def test_there_is_a_notebook():
  assert NOTEBOOKS
