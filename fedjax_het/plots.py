"""PNG plots of a run's logged metrics (matplotlib, no display needed)."""
import matplotlib

matplotlib.use('Agg')
import matplotlib.pyplot as plt  # pylint: disable=g-import-not-at-top


def plot_curves(rows: list[dict], path: str, title: str = '') -> None:
  """Test accuracy and train loss against rounds, side by side, as a PNG."""
  rounds = [r['round'] for r in rows]
  fig, (acc_ax, loss_ax) = plt.subplots(1, 2, figsize=(10, 3.8))
  acc_ax.plot(rounds, [r['test_accuracy'] for r in rows], marker='.')
  acc_ax.set(xlabel='round', ylabel='test accuracy', title='Test accuracy')
  loss_ax.plot(rounds, [r['train_loss'] for r in rows], marker='.',
               color='tab:red')
  loss_ax.set(xlabel='round', ylabel='train loss', title='Train loss')
  for ax in (acc_ax, loss_ax):
    ax.grid(alpha=0.3)
  if title:
    fig.suptitle(title)
  fig.tight_layout()
  fig.savefig(path, dpi=110)
  plt.close(fig)
