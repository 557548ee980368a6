"""How XLA:CPU lowers a workload's centralised step: what bounds the roofline fraction.

Command:  python experiments/bench/cpu_lowering.py [--workload W-PFL] [--repeats 2]
            [--calls 1] [--variants im2col,im2col+eigen,xla,xla+ynn-conv]

`fedjax-het bench` reports a round's fraction of the roofline next to the
centralised limit: one model taking the round's cohort × steps minibatches as
jitted SGD steps in one `lax.scan` (`bench.centralized_program`), the same
arithmetic with no federation. On W-PFL our round is within ~1.1× of that limit,
so the fraction the limit itself reaches is the ceiling of the round's, set by
how XLA:CPU lowers the model. This script compiles that centralised program under
the variants below and times them alternated in one process
(`alternation.alternate`), printing s per run, GFLOP/s, the roofline fraction
(FLOPs by XLA's cost analysis over the FLOP/s of `bench.matmul_case`, the
matmul of `fedjax-het bench`, alternated with the variants as one more row, so
that both see the same machine) and the
largest parameter difference from the first variant.

Variants: a convolution lowering (`im2col`: patches + one matmul, the CPU
default; `xla`: XLA's convolution op) and optionally an XLA:CPU library choice
after '+': `eigen` turns YNNPACK's dot fusions off (XLA's own/Eigen dots),
`ynn-conv` hands convolutions to YNNPACK. The library names are XLA's
`xla_cpu_experimental_ynn_fusion_type` values of jaxlib 0.10; its default is
YNNPACK for single dots.
"""
import argparse

import alternation
import jax
import jax.numpy as jnp
import numpy as np

from fedjax_het import models
from fedjax_het.tools import bench

YNN_FUSIONS = 'xla_cpu_experimental_ynn_fusion_type'
LIBRARIES = {
    '': None,
    'eigen': {YNN_FUSIONS: ''},  # an empty list: no YNNPACK fusions
    'ynn-conv': {YNN_FUSIONS: 'LIBRARY_FUSION_TYPE_INDIVIDUAL_CONVOLUTION'},
}


def build(workload: bench.Workload, variant: str) -> tuple:
  """(compiled run, params, FLOPs per run) of one 'conv_impl[+library]' variant."""
  conv_impl, _, library = variant.partition('+')
  if library not in LIBRARIES:
    raise ValueError(f'unknown library {library!r} in {variant!r}; choose one of '
                     f'{", ".join(l for l in LIBRARIES if l)}.')
  options = {**workload.model_options, 'conv_impl': conv_impl}
  model = models.create_model(workload.model, workload.num_classes, **options)
  params = models.init_params(model, jax.random.PRNGKey(0), workload.shape)
  run, flops, _ = bench.centralized_program(workload, model, params, LIBRARIES[library])
  return run, params, flops * workload.cohort * workload.local_steps


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-PFL', choices=sorted(bench.WORKLOADS))
  parser.add_argument('--variants', default='im2col,im2col+eigen,xla,xla+ynn-conv')
  parser.add_argument('--repeats', type=int, default=2)
  parser.add_argument('--calls', type=int, default=1)
  args = parser.parse_args()
  workload = bench.WORKLOADS[args.workload]
  if workload.model == 'mlp':
    parser.error(f'{args.workload} has no convolutions.')
  built = {variant: build(workload, variant) for variant in args.variants.split(',')}
  final = {name: jax.block_until_ready(run(params)) for name, (run, params, _) in built.items()}
  steps = {name: (run, params) for name, (run, params, _) in built.items()}
  matmul, matrix, matmul_flops = bench.matmul_case()
  matmul_row = f'f32 matmul {matrix.shape[0]}²'
  steps[matmul_row] = (lambda _: matmul(matrix), matrix)
  wall, cpu = alternation.alternate(steps, args.repeats, args.calls)
  flops_per_s = matmul_flops / np.median(wall[matmul_row])
  print(f'{args.workload} centralised step on {jax.default_backend()}: {args.repeats} repeats x '
        f'{args.calls} runs of {workload.cohort * workload.local_steps} minibatch steps')
  print('\n'.join(alternation.ratio_rows(wall, cpu)))
  print(f'\n| variant | GFLOP/s | roofline reached (matmul {flops_per_s / 1e9:.0f} GFLOP/s) '
        '| max abs param diff vs first |')
  print('| --- | ---: | ---: | ---: |')
  reference = jax.tree.leaves(next(iter(final.values())))
  for name, (_, _, flops) in built.items():
    seconds = np.median(wall[name])
    diff = max(float(jnp.max(jnp.abs(a - b)))
               for a, b in zip(jax.tree.leaves(final[name]), reference))
    print(f'| {name} | {flops / seconds / 1e9:.0f} | '
          f'{100 * flops / flops_per_s / seconds:.0f}% | {diff:.1e} |')


if __name__ == '__main__':
  main()
