"""Repository scripts (experiments/...) loaded as modules in tests."""
import importlib.util
import os

REPO = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def load_script(path, monkeypatch=None):
  """The script at `path` (absolute or relative to the repository) as a module
  named by its file stem. With `monkeypatch`, the script's directory is first
  on sys.path for the test, as `python path` has it, so that its imports of
  sibling scripts resolve."""
  path = os.path.join(REPO, path)
  if monkeypatch is not None:
    monkeypatch.syspath_prepend(os.path.dirname(path))
  name = os.path.splitext(os.path.basename(path))[0]
  spec = importlib.util.spec_from_file_location(name, path)
  module = importlib.util.module_from_spec(spec)
  spec.loader.exec_module(module)
  return module
