"""Runs every command of README.md briefly and reports pass / fail per command.

Usage:  python tests/readme_commands.py [--list] [--only TEXT] [--timeout S] [--logs DIR]

Not a pytest test (it trains every README experiment for a round, many minutes on 2 CPU
cores): run it from the repository root before a release, in the background with a log.

The commands are the lines of the README's code blocks that start with `fedjax-het`,
`python` or `python3`, and the inline `fedjax-het ...` / `python ...` in backticks; a line
ending in `\\` continues on the next, a `# comment` is dropped, and of a chain `a && b` the
install steps are dropped (the checkout is the one under test). Each runs from the
repository root with this interpreter (`fedjax-het` as `python -m fedjax_het`, so the
checkout's code) and the short-run overrides below, each documented:

- `fedjax-het --config ...` trains `--config.rounds=1` (`--seeds 1`) in a fresh workdir
  under --logs; `fedjax-het bench` times `--rounds 1`;
- scripts get their own short options (SHORT_RUNS: one round or repeat, one seed).

A command is not run when it names data this machine cannot hold (a `DIR` / `FILE`
placeholder, `~/tensorflow_datasets`), installs packages, or is the whole test suite; one that
stops with a missing-data line is reported `no data`. Each command's output goes to
<logs>/<n>.log; the report is a Markdown table: command, status, seconds, the last line.
"""
import argparse
import os
import re
import shlex
import subprocess
import sys
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
PROGRAMS = ('fedjax-het', 'python', 'python3')
# Placeholders and data locations a command needs filled in or present.
NEEDS_DATA = ('DIR', 'FILE', '~/tensorflow_datasets', 'PATH')
# What a run prints when its data are absent (fedjax_het.data.sources, data.natural).
NO_DATA = re.compile(r'does not exist; put|is not prepared|is read from its files|'
                     r'needs its vocabulary|no such file', re.IGNORECASE)
# script → the options that make its run short (appended; a later option wins).
SHORT_RUNS = {
    'experiments/hist/compare.py': ['--config.rounds=1', '--workdir={workdir}'],
    'experiments/fedacs/compare.py': ['--seeds=0', '--config.rounds=1', '--workdir={workdir}'],
    'experiments/fedacs/quadratic.py': ['--config.rounds=10', '--workdir={workdir}'],
    'experiments/composition/split_clock.py': ['--seeds=1', '--workdir={workdir}'],
    'experiments/bench/speed_table.py': ['--repeats=1', '--rounds=1', '--peers='],
    'experiments/bench/method_ratios.py': ['--repeats=1', '--rounds=1'],
    'experiments/bench/backends.py': ['--rounds=1'],
    'experiments/bench/cost_of_realism.py': ['--repeats=1', '--rounds=1'],
    'experiments/bench/privacy_cost.py': ['--repeats=1', '--rounds=1'],
    'experiments/bench/buffered.py': ['--repeats=1', '--calls=1', '--clients=2000'],
    'experiments/fedbuff/compare.py': ['--seeds=1', '--sync-rounds=2', '--out={workdir}'],
    'experiments/bench/cpu_lowering.py': ['--repeats=1'],
}
TRAINER_SHORT = ['--config.rounds=1', '--seeds=1', '--workdir={workdir}']
BENCH_SHORT = ['--rounds=1']


def _joined_lines(text: str):
  """The lines of `text` with `\\`-continuations joined."""
  pending = ''
  for line in text.splitlines():
    if line.rstrip().endswith('\\'):
      pending += line.rstrip()[:-1] + ' '
      continue
    yield pending + line
    pending = ''


def _command(line: str) -> str | None:
  """The command of a code-block line (its last step of a `&&` chain, no comment), or None."""
  line = re.sub(r'\s+#\s.*$', '', line).strip()
  line = line.split('&&')[-1].strip()
  return line if line.split(' ', 1)[0] in PROGRAMS else None


def readme_commands(readme: str) -> list[str]:
  """Every command of the README, in order, each once."""
  commands = []
  blocks = re.findall(r'```[a-z]*\n(.*?)```', readme, re.DOTALL)
  for block in blocks:
    commands += filter(None, map(_command, _joined_lines(block)))
  outside = re.sub(r'```[a-z]*\n.*?```', '', readme, flags=re.DOTALL)
  commands += [c.strip() for c in re.findall(r'`((?:fedjax-het|python3?) [^`]+)`', outside)]
  return list(dict.fromkeys(' '.join(c.split()) for c in commands))


def why_not_run(command: str) -> str | None:
  """Why `command` is not run here, or None."""
  words = shlex.split(command)
  if any(re.search(rf'(^|[=\s]){re.escape(p)}(\b|/|$)', command) for p in NEEDS_DATA):
    return 'needs data or a file: fill in the placeholder'
  if words[:3] in (['python', '-m', 'pytest'], ['python3', '-m', 'pytest']):
    return 'the whole test suite: run it on its own'
  return None


def short_argv(command: str, workdir: str) -> list[str]:
  """The argv that runs `command` briefly with this interpreter (module docstring)."""
  words = shlex.split(command)
  program, args = words[0], words[1:]
  if program == 'fedjax-het':
    extra = BENCH_SHORT if args[:1] == ['bench'] else (
        [] if '--show-config' in args else TRAINER_SHORT)
    argv = [sys.executable, '-m', 'fedjax_het', *args, *extra]
  else:
    script = next((a for a in args if a.endswith('.py')), '')
    argv = [sys.executable, *args, *SHORT_RUNS.get(script, [])]
  return [a.replace('{workdir}', workdir) for a in argv]


def run_command(command: str, workdir: str, log: str, timeout: float) -> tuple[str, float, str]:
  """(status, seconds, last output line) of one short run, its output written to `log`."""
  argv = short_argv(command, workdir)
  started = time.perf_counter()
  with open(log, 'w') as out:
    out.write('$ ' + shlex.join(argv) + '\n')
    out.flush()
    try:
      code = subprocess.run(argv, cwd=ROOT, stdout=out, stderr=subprocess.STDOUT,
                            timeout=timeout, check=False).returncode
    except subprocess.TimeoutExpired:
      code = None
  seconds = time.perf_counter() - started
  with open(log) as f:
    lines = [l.strip() for l in re.split(r'[\r\n]', f.read()) if l.strip()]
  last = lines[-1] if lines else ''
  if code is None:
    return f'timeout ({timeout:g} s)', seconds, last
  if code == 0:
    return 'pass', seconds, last
  return ('no data' if NO_DATA.search(last) else f'FAIL ({code})'), seconds, last


def main(argv: list[str]) -> int:
  parser = argparse.ArgumentParser(description=__doc__.split('\n\n')[0])
  parser.add_argument('--list', action='store_true', help='print the commands and exit')
  parser.add_argument('--only', default='', help='run the commands containing TEXT')
  parser.add_argument('--timeout', type=float, default=1800, help='seconds per command')
  parser.add_argument('--logs', default='', help='the folder in which each invocation makes '
                      'a new folder for its logs and workdirs (default: the temporary '
                      'directory)')
  args = parser.parse_args(argv)
  with open(os.path.join(ROOT, 'README.md')) as f:
    commands = [c for c in readme_commands(f.read()) if args.only in c]
  if args.list:
    for i, command in enumerate(commands, 1):
      print(f'{i:3d}  {command}' + (f'   [not run: {why_not_run(command)}]'
                                    if why_not_run(command) else ''))
    return 0
  if args.logs:
    os.makedirs(args.logs, exist_ok=True)
  # A folder of its own: two invocations never share a command's workdir.
  logs = tempfile.mkdtemp(prefix='readme_commands_', dir=args.logs or None)
  print(f'logs: {logs}\n\n| # | command | status | s | last line |\n| --- | --- | --- | --- | --- |',
        flush=True)
  failed = 0
  for i, command in enumerate(commands, 1):
    reason = why_not_run(command)
    if reason:
      status, seconds, last = 'not run', 0.0, reason
    else:
      status, seconds, last = run_command(command, os.path.join(logs, f'run{i}'),
                                          os.path.join(logs, f'{i}.log'), args.timeout)
    failed += status.startswith(('FAIL', 'timeout'))
    print(f'| {i} | `{command}` | {status} | {seconds:.0f} | {last[:160]} |', flush=True)
  return 1 if failed else 0


if __name__ == '__main__':
  sys.exit(main(sys.argv[1:]))
