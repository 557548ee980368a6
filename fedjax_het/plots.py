"""PNG plots of a run's logged metrics (matplotlib, no display needed).

Figures are built with `matplotlib.figure.Figure`, not pyplot, so importing
this module never changes the user's matplotlib backend (e.g. in a notebook).
"""
from matplotlib.figure import Figure


def plot_curves(rows: list[dict], path: str, title: str = '') -> None:
  """Test accuracy and train loss against rounds, side by side, as a PNG."""
  rounds = [r['round'] for r in rows]
  fig = Figure(figsize=(10, 3.8))
  acc_ax, loss_ax = fig.subplots(1, 2)
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


def comparison_figure(bars: dict[str, list], headers: list[str],
                      sweeps: dict[str, dict[float, float]], title: str = '',
                      errors: dict[str, list] | None = None,
                      sweep_errors: dict[str, dict[float, float]] | None = None
                      ) -> Figure:
  """Grouped bars (one group per header, one bar per method) and, where any
  method has accuracies at ≥ 2 capacities, accuracy against capacity γ.

  `errors` and `sweep_errors` (same layout as `bars` and `sweeps`, None
  entries allowed) draw ± error bars, e.g. the std over seeds. One legend for
  both panels sits outside them, so it never covers a bar.
  """
  zero = lambda values: [v if v is not None else 0 for v in values]
  with_sweep = any(len(s) >= 2 for s in sweeps.values())
  fig = Figure(figsize=(13 if with_sweep else 9, 4), layout='constrained')
  axes = fig.subplots(1, 2 if with_sweep else 1, squeeze=False)
  bar_ax = axes[0, 0]
  width = 0.8 / max(1, len(bars))
  for i, (label, values) in enumerate(bars.items()):
    xs = [j + i * width for j in range(len(headers))]
    yerr = zero(errors[label]) if errors else None
    bar_ax.bar(xs, zero(values), width, yerr=yerr, capsize=2, label=label,
               color=f'C{i}')
  bar_ax.set_xticks([j + 0.4 - width / 2 for j in range(len(headers))])
  bar_ax.set_xticklabels(headers, rotation=30, ha='right', fontsize=8)
  bar_ax.set(ylabel='test accuracy', ylim=(0, 1))
  bar_ax.grid(alpha=0.3, axis='y')
  if with_sweep:
    sweep_ax = axes[0, 1]
    for i, (label, sweep) in enumerate(sweeps.items()):
      if sweep:
        yerr = zero(sweep_errors[label].values()) if sweep_errors else None
        sweep_ax.errorbar(list(sweep), list(sweep.values()), yerr=yerr,
                          marker='o', capsize=2, color=f'C{i}')
    sweep_ax.set(xscale='log', xlabel='submodel size γ',
                 ylabel='global test accuracy', ylim=(0, 1),
                 title='Submodels of any size (unparticipated clients)')
    sweep_ax.grid(alpha=0.3)
  fig.legend(*bar_ax.get_legend_handles_labels(), loc='outside right upper',
             fontsize=8)
  if title:
    fig.suptitle(title)
  return fig


def plot_comparison(bars: dict[str, list], headers: list[str],
                    sweeps: dict[str, dict[float, float]], path: str,
                    title: str = '', errors: dict[str, list] | None = None,
                    sweep_errors: dict[str, dict[float, float]] | None = None
                    ) -> None:
  """`comparison_figure` as a PNG."""
  comparison_figure(bars, headers, sweeps, title, errors,
                    sweep_errors).savefig(path, dpi=110)


def accuracy_against_figure(curves: dict[str, list[list[dict]]],
                            keys: list[str], title: str = '') -> Figure:
  """Test accuracy against running totals (e.g. GB exchanged, communication
  rounds), one panel per key of the `metrics.jsonl` rows and one colour per
  label; every run of a label (its seeds) is a line.

  Args:
    curves: label → the rows of each of its runs.
    keys: the x-axis keys, e.g. ('gb', 'comm_rounds').
  """
  fig = Figure(figsize=(4.5 * len(keys) + 2, 3.8), layout='constrained')
  axes = fig.subplots(1, len(keys), squeeze=False)[0]
  for ax, key in zip(axes, keys):
    for i, (label, runs) in enumerate(curves.items()):
      for j, rows in enumerate(runs):
        points = [(r[key], r['test_accuracy']) for r in rows if key in r]
        if points:
          xs, ys = zip(*points)
          ax.plot(xs, ys, marker='.', color=f'C{i}',
                  label=label if j == 0 else None)
    ax.set(xlabel=key, ylabel='test accuracy', title=f'Accuracy against {key}')
    ax.grid(alpha=0.3)
  fig.legend(*axes[0].get_legend_handles_labels(), loc='outside right upper',
             fontsize=8)
  if title:
    fig.suptitle(title)
  return fig
