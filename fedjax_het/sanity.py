"""Warnings for runs that are valid but almost certainly not what was meant.

Cheap host-side checks over the federation's counts and labels (before
training) and the final accuracy (after): a batch larger than most clients'
data, classes that no client holds, a final accuracy at chance level. The
trainer prints each once and records them in summary.json (`warnings`).
"""
import sys

import numpy as np

from fedjax_het.data.federated import FederatedSplit, client_label_histogram

# A run is at chance level when its final test accuracy is within
# CHANCE_MARGIN times the share of the most common test class and its test
# loss above LOSS_MARGIN times that of the best constant guess (the test
# labels' entropy): a short run that has not learned yet (loss near the
# guess's) is not flagged, a run that training broke (client_lr=1e6) is.
CHANCE_MARGIN = 1.1
LOSS_MARGIN = 2.0


def data_warnings(split: FederatedSplit, batch_size: int) -> list[str]:
  """The warnings about the training federation of `split`."""
  counts = np.asarray(split.train.counts)
  warnings = []
  smaller = int(np.sum(counts < batch_size))
  if 2 * smaller > counts.size:
    median = float(np.median(counts))
    warnings.append(
        f'batch_size={batch_size} is larger than the data of {smaller} of '
        f'{counts.size} clients (median {median:g} examples): each batch '
        f'repeats a typical client\'s examples about '
        f'{batch_size / median:.0f} times.')
  if split.train.label_shape == ():  # class labels (next-token labels: a vocabulary)
    held = client_label_histogram(split.train, split.num_classes).sum(0)
    missing = np.flatnonzero(held == 0)
    if missing.size:
      warnings.append(
          f'{missing.size} of {split.num_classes} classes are held by no '
          f'client (classes {", ".join(map(str, missing[:10]))}'
          f'{", ..." if missing.size > 10 else ""}), so they are never '
          'trained on.')
  return warnings


def chance_warnings(summary: dict, test_y: np.ndarray) -> list[str]:
  """A warning if the run of `summary` ends at chance level (see
  CHANCE_MARGIN; class labels only)."""
  test_y = np.asarray(test_y)
  if test_y.ndim != 1 or not test_y.size:
    return []
  shares = np.bincount(test_y) / test_y.size
  chance = shares.max()
  guess_loss = -np.sum(shares[shares > 0] * np.log(shares[shares > 0]))
  accuracy, loss = summary['final_test_accuracy'], summary['final_test_loss']
  if accuracy > CHANCE_MARGIN * chance or loss <= LOSS_MARGIN * guess_loss:
    return []
  return [f'the final test accuracy {accuracy:.3f} is at chance level '
          f'({chance:.3f}, always answering the most common class) with a '
          f'test loss of {loss:.3g}, worse than a constant guess '
          f'({guess_loss:.3g}): training failed (is a learning rate far too '
          'large?).']


def report(warnings: list[str]) -> None:
  """Prints each warning on one line of stderr."""
  for warning in warnings:
    print(f'fedjax-het: warning: {warning}', file=sys.stderr)
