"""PyTorch peer: FedAvg as a plain sequential PyTorch loop over clients, on `fedjax-het bench`'s workloads.

Command:  python experiments/bench/torch_peer.py [--workload W-MLP|W-PFL]
            [--rounds 10] [--threads 0] [--no-check]

This is the "sequential PyTorch loop" of the README's Speed table: FedAvg as
most research code writes it. One torch model is reused by every client; one
round is

    for client in cohort:                        # K clients, one after another
      model ← params                             # in-place copy of the global weights
      S × torch.optim.SGD step (batch B, lr η_c, softmax cross-entropy mean)
      delta_sum += params − model
    params ← params − η_s · delta_sum / K        # η_s = 1, uniform weights

eagerly on the CPU (`--threads N`: `torch.set_num_threads(N)`; 0 keeps
torch's default, one thread per core).

How it matches a fedjax_het FedAvg round: the workload (synthetic data,
initial params, client lr 0.01, uniform weights, server lr 1) is
`bench.build_federation`'s; the torch models are the flax `mlp` and
`simple_cnn` layer by layer, their weights converted from the flax params
(Dense [in, out] → Linear [out, in], conv HWIO → OIHW, images NHWC → NCHW, and
simple_cnn's fc1 columns permuted from flax's NHWC flatten to torch's NCHW
flatten). The cohort and each client's minibatch rows are drawn with
fedjax_het's samplers (`FederatedAlgorithm.plan_round`,
`core.batching.batch_indices`), as drjax_peer.py draws them; where DrJAX and
fedjax_het draw them inside the jitted round, here they are drawn for all
rounds up front (one jitted call) and are not timed: a torch loop would draw
them on the host, at a cost far below a round's. The data are torch tensors
before timing starts. `--check` (default) runs one torch round and one
fedjax_het round (`RoundRunner`, backend auto) from the same initial params
with the same cohort and rows and reports the largest parameter difference.

torch is not a dependency of fedjax_het, nor of its `peers` extra (PyPI's
Linux torch wheel pulls the CUDA libraries); install the CPU wheel with

    pip install torch --index-url https://download.pytorch.org/whl/cpu

Prints one JSON line: s/round median/min/max over `--rounds` rounds after a
warm-up round, examples/s = K·S·B / median and, unless `--no-check`,
`max_abs_diff_vs_fedjax_het`.

Measured with torch 2.13.0+cpu on the 2-core CPU benchmark machine while
another benchmark was running on it, so these are not Speed-table numbers
(rerun on an idle machine). With torch's default 2 threads the rounds were
erratic (OpenMP threads waiting for the busy core); with --threads 1 steady:
* W-MLP, --rounds 5: 2 threads 2.39 s/round median (0.27 .. 25.3);
  1 thread 0.274 s/round (0.266 .. 0.281), 9,100 examples/s.
  Check: max abs diff 7.5e-9 (the round moves the params by up to 3.4e-3).
* W-PFL, --rounds 2: 2 threads 4.82 and 57.1 s; 1 thread (--rounds 1)
  6.49 s/round, 390 examples/s. Check: max abs diff 8.9e-8.
"""
import argparse
import json
import math
import time

import jax
import jax.numpy as jnp
import numpy as np
import torch
from torch import nn
from torch.nn import functional as F

from fedjax_het.tools import bench
from fedjax_het.core import batching


class TorchMLP(nn.Module):
  """fedjax_het's `mlp`: [N, ...] (flattened) -> logits [N, num_classes].

  fc1..fcK (Linear + ReLU) for the `hidden` widths, then `head` (Linear), the
  flax layer names.
  """

  def __init__(self, in_features: int, hidden: tuple, num_classes: int):
    super().__init__()
    widths = (in_features, *hidden)
    for i in range(len(hidden)):
      self.add_module(f'fc{i + 1}', nn.Linear(widths[i], widths[i + 1]))
    self.hidden_layers = len(hidden)
    self.head = nn.Linear(widths[-1], num_classes)
    # A flat [N, H·W·C] row of NHWC pixels is the flax flatten order already.
    self.flattened_maps = {}

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = x.flatten(1)
    for i in range(self.hidden_layers):
      x = F.relu(getattr(self, f'fc{i + 1}')(x))
    return self.head(x)


class TorchSimpleCNN(nn.Module):
  """fedjax_het's `simple_cnn` (no norm): NCHW images -> logits [N, num_classes].

  conv1 3x3(32) - relu - conv2 3x3(64) - relu - maxpool2 - flatten - fc1(128)
  - relu - head, VALID convs. `flattened_maps['fc1']` is the (H, W, C) map fc1
  reads, whose flatten order differs between flax (NHWC) and torch (NCHW).
  """

  def __init__(self, image_shape: tuple, num_classes: int):
    super().__init__()
    height, width, channels = image_shape
    self.conv1 = nn.Conv2d(channels, 32, 3)
    self.conv2 = nn.Conv2d(32, 64, 3)
    pooled = ((height - 4) // 2, (width - 4) // 2, 64)
    self.fc1 = nn.Linear(math.prod(pooled), 128)
    self.head = nn.Linear(128, num_classes)
    self.flattened_maps = {'fc1': pooled}

  def forward(self, x: torch.Tensor) -> torch.Tensor:
    x = F.relu(self.conv1(x))
    x = F.relu(self.conv2(x))
    x = F.max_pool2d(x, 2).flatten(1)
    x = F.relu(self.fc1(x))
    return self.head(x)


def torch_model(workload: bench.Workload) -> nn.Module:
  """The torch twin of the workload's flax model (W-MLP's mlp, W-PFL's simple_cnn)."""
  if workload.model == 'mlp':
    return TorchMLP(math.prod(workload.shape), tuple(workload.model_options['hidden']),
                    workload.num_classes)
  if workload.model == 'simple_cnn':
    return TorchSimpleCNN(workload.shape, workload.num_classes)
  raise ValueError(f'no torch twin of model {workload.model!r}.')


def torch_weight(kernel: np.ndarray, flattened_map: tuple | None) -> np.ndarray:
  """A flax kernel in torch's layout.

  Conv [kh, kw, I, O] -> [O, I, kh, kw]; Dense [in, O] -> [O, in], and for a
  Dense that reads a flattened (H, W, C) map, its `in` axis reordered from
  NHWC (h, w, c) to NCHW (c, h, w) flatten order.
  """
  if kernel.ndim == 4:
    return kernel.transpose(3, 2, 0, 1)
  if flattened_map is None:
    return kernel.T
  height, width, channels = flattened_map
  return (kernel.reshape(height, width, channels, -1).transpose(3, 2, 0, 1)
          .reshape(kernel.shape[1], -1))


def torch_params(params, model: nn.Module) -> dict:
  """flax params {layer: {kernel, bias}} -> {'layer.weight', 'layer.bias'} float32 tensors."""
  tensors = {}
  for layer, leaves in params.items():
    weight = torch_weight(np.asarray(leaves['kernel']), model.flattened_maps.get(layer))
    tensors[f'{layer}.weight'] = torch.from_numpy(np.ascontiguousarray(weight))
    tensors[f'{layer}.bias'] = torch.from_numpy(np.array(leaves['bias']))
  return tensors


def torch_data(data, workload: bench.Workload) -> tuple[torch.Tensor, torch.Tensor]:
  """Federated data as torch tensors: x [M, N, ...] (images NCHW for CNNs), y int64 [M, N]."""
  x = torch.from_numpy(np.asarray(data.x))
  if workload.model != 'mlp':
    x = x.permute(0, 1, 4, 2, 3).contiguous()
  return x, torch.from_numpy(np.asarray(data.y, np.int64))


def minibatch_rows(method, state, rounds: int,
                   max_examples: int) -> tuple[np.ndarray, np.ndarray]:
  """Cohorts and minibatch rows of rounds state.round .. + rounds − 1, as fedjax_het draws them.

  `max_examples` is the clients' padded length N. Returns client ids int64
  [R, K] and row indices int64 [R, K, S, B] into the clients' N rows.
  """
  config = method.config
  epochs_bound = batching.epochs_per_batch(config.batch_size, method.min_client_count)
  counts = method.client_counts

  @jax.jit
  def draw(state):
    plans = method.plan_round(state)

    def client_rows(client_id, key):
      return jax.vmap(lambda step: batching.batch_indices(
          key, step, counts[client_id], batch_size=config.batch_size,
          max_examples=max_examples, max_epochs_per_batch=epochs_bound))(
              jnp.arange(config.local_steps))

    return plans.client_id, jax.vmap(client_rows)(plans.client_id, plans.key)

  drawn = [draw(state.replace(round=state.round + r)) for r in range(rounds)]
  return (np.stack([np.asarray(ids, np.int64) for ids, _ in drawn]),
          np.stack([np.asarray(rows, np.int64) for _, rows in drawn]))


def fedavg_round(model: nn.Module, optimizer: torch.optim.Optimizer,
                 global_params: list[torch.Tensor], delta_sum: list[torch.Tensor],
                 x: torch.Tensor, y: torch.Tensor, client_ids: torch.Tensor,
                 rows: torch.Tensor, server_lr: float) -> None:
  """One FedAvg round, clients one after another; updates `global_params` in place.

  `global_params` and `delta_sum` are lists like `model.parameters()`;
  client_ids int64 [K], rows int64 [K, S, B] into the clients' examples.
  """
  parameters = list(model.parameters())
  with torch.no_grad():
    for total in delta_sum:
      total.zero_()
  for client_id, client_rows in zip(client_ids.tolist(), rows):
    with torch.no_grad():
      for local, start in zip(parameters, global_params):
        local.copy_(start)
    client_x, client_y = x[client_id], y[client_id]
    for step_rows in client_rows:
      optimizer.zero_grad()
      loss = F.cross_entropy(model(client_x[step_rows]), client_y[step_rows])
      loss.backward()
      optimizer.step()
    with torch.no_grad():
      for total, start, local in zip(delta_sum, global_params, parameters):
        total.add_(start).sub_(local)
  with torch.no_grad():
    for start, total in zip(global_params, delta_sum):
      start.sub_(total, alpha=server_lr / len(client_ids))


class TorchFedAvg:
  """The torch loop's state: one reusable model and optimiser, the global weights."""

  def __init__(self, workload: bench.Workload, method, params):
    self.model = torch_model(workload)
    initial = torch_params(params, self.model)
    self.names = [name for name, _ in self.model.named_parameters()]
    self.global_params = [initial[name].clone() for name in self.names]
    self.delta_sum = [torch.zeros_like(p) for p in self.global_params]
    self.optimizer = torch.optim.SGD(self.model.parameters(), lr=method.config.client_lr)
    self.server_lr = method.config.server_lr

  def run_round(self, x, y, client_ids, rows) -> None:
    fedavg_round(self.model, self.optimizer, self.global_params, self.delta_sum,
                 x, y, client_ids, rows, self.server_lr)

  def state_dict(self) -> dict:
    return dict(zip(self.names, self.global_params))


def check_against_fedjax_het(workload, method, runner, params, data, x, y,
                             client_ids, rows) -> float:
  """Largest |param difference| after one torch and one fedjax_het round from `params`.

  `data` is the federation (host arrays), `x`, `y` its torch tensors;
  `client_ids`, `rows` are round 0's draws ([K], [K, S, B]) of the state
  `method.init(params, PRNGKey(1))` that the fedjax_het round starts from.
  """
  loop = TorchFedAvg(workload, method, params)
  loop.run_round(x, y, client_ids, rows)
  data = runner.place(data.to_device())
  ours, _ = runner.run(bench.initial_state(method, runner, params), data, 1)
  expected = torch_params(jax.device_get(ours.params), loop.model)
  return max(float((loop.state_dict()[name] - tensor).abs().max())
             for name, tensor in expected.items())


def peer_benchmark(workload_name: str, rounds: int = 10, threads: int = 0,
                   check: bool = True) -> dict:
  """Times `rounds` rounds of the torch FedAvg loop on a `fedjax-het bench` workload."""
  if threads:
    torch.set_num_threads(threads)
  workload = bench.WORKLOADS[workload_name]
  if workload.algorithm != 'fedavg':
    raise ValueError(f'{workload_name} runs {workload.algorithm}; the torch peer '
                     'is FedAvg (W-MLP, W-PFL).')
  split, _, params, method, runner = bench.build_federation(workload, 'auto', 'fedavg')
  x, y = torch_data(split.train, workload)
  state = method.init(params, jax.random.PRNGKey(1))
  client_ids, rows = map(torch.from_numpy, minibatch_rows(
      method, state, rounds + 1, split.train.max_examples))
  loop = TorchFedAvg(workload, method, params)
  loop.run_round(x, y, client_ids[0], rows[0])  # warm-up
  seconds = []
  for r in range(1, rounds + 1):
    tic = time.perf_counter()
    loop.run_round(x, y, client_ids[r], rows[r])
    seconds.append(time.perf_counter() - tic)
  result = {
      'workload': workload_name, 'peer': 'pytorch-loop', 'algorithm': 'fedavg',
      'torch_version': torch.__version__, 'threads': torch.get_num_threads(),
      'seconds': seconds, **bench.round_timings(workload, seconds),
  }
  if check:
    result['max_abs_diff_vs_fedjax_het'] = check_against_fedjax_het(
        workload, method, runner, params, split.train, x, y, client_ids[0],
        rows[0])
  return result


def main():
  parser = argparse.ArgumentParser(description=__doc__.splitlines()[0])
  parser.add_argument('--workload', default='W-MLP', choices=('W-MLP', 'W-PFL'))
  parser.add_argument('--rounds', type=int, default=10)
  parser.add_argument('--threads', type=int, default=0,
                      help="torch's intra-op threads (0: torch's default)")
  parser.add_argument('--no-check', dest='check', action='store_false',
                      help='skip the comparison with a fedjax_het round')
  args = parser.parse_args()
  if args.rounds < 1:
    parser.error('--rounds must be at least 1')
  print(json.dumps(peer_benchmark(args.workload, args.rounds, args.threads,
                                  args.check)), flush=True)


if __name__ == '__main__':
  main()
