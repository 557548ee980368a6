"""Some rows of scaled_digits.py's comparison, fitted and trained alone (e.g. one process per row
on a machine with many cores), into the workdir layout of the full command.

Command:   python experiments/cos2p/scaled_rows.py --rows cos2p,fedrolex --seeds 3 --workdir runs/cos2p/scaled
           (labels: scaled_digits.LABELS). The full command on the same workdir then trains only
           the runs that are not finished and prints the whole table; this one prints its rows'.
"""
import argparse

from fedjax_het import cli, compare, run

import scaled_digits


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--rows', required=True, help='comma-separated labels: ' +
                      ', '.join(scaled_digits.LABELS))
  parser.add_argument('--seeds', type=int, default=1)
  parser.add_argument('--workdir', default='runs/cos2p/scaled')
  args = parser.parse_args()
  labels = args.rows.split(',')
  unknown = [label for label in labels if label not in scaled_digits.LABELS]
  if unknown:
    parser.error(f'unknown rows {unknown}; choose from {", ".join(scaled_digits.LABELS)}.')
  cli.split_cpu_into_devices()
  configs = {label: scaled_digits.row_config(label) for label in labels}
  print(compare.run_comparison(configs, args.workdir, run.train, scaled_digits.COLUMNS,
                               scaled_digits.TITLE, seeds=args.seeds,
                               curves=scaled_digits.CURVES))


if __name__ == '__main__':
  main()
