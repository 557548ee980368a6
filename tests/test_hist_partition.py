"""HIST's disjoint partitions of hidden neurons (`fedjax_het.submodel.disjoint`)."""
import jax
import jax.numpy as jnp
import numpy as np
import pytest

from fedjax_het import models
from fedjax_het.submodel import disjoint, disjoint_partition


# Params and counts are numpy arrays: op by op, jax arrays would compile every
# op on its own.
def params_of(name, input_shape, **options):
  """(model, zero params): partitions read only the structure and shapes."""
  model = models.create_model(name, 10, **options)
  shapes = models.parameter_shapes(model, input_shape)
  return model, jax.tree.map(lambda s: np.zeros(s.shape, s.dtype), shapes)


def coverage(masks):
  """How many masks hold each parameter."""
  return jax.tree.map(lambda *m: sum(np.asarray(x, np.int32) for x in m),
                      *masks)


def test_fcnn_partition_is_disjoint_covers_every_neuron_and_shares_the_bias():
  _, params = params_of('mlp', (28, 28, 1), hidden=(300,))
  masks = disjoint_partition(jax.random.PRNGKey(1), params, 4)
  assert len(masks) == 4
  count = coverage(masks)
  for leaf in (count['fc1']['kernel'], count['fc1']['bias'],
               count['head']['kernel']):
    np.testing.assert_array_equal(leaf, 1)  # exactly one owner
  np.testing.assert_array_equal(count['head']['bias'], 4)  # shared
  # Uniform: 75 neurons per cell, each with 784 + 1 + 10 parameters.
  sizes = [sum(int(np.asarray(m).sum()) for m in jax.tree.leaves(mask))
           for mask in masks]
  assert sizes == [75 * 795 + 10] * 4
  # A neuron's incoming column, bias and outgoing row go together.
  for mask in masks:
    neurons = np.asarray(mask['fc1']['bias'])
    np.testing.assert_array_equal(mask['fc1']['kernel'],
                                  np.broadcast_to(neurons, (784, 300)))
    np.testing.assert_array_equal(mask['head']['kernel'],
                                  np.broadcast_to(neurons[:, None], (300, 10)))


def test_lenet_partitions_fc1_and_shares_convs_fc2_neurons_and_head():
  _, params = params_of('lenet5', (28, 28, 1), padding='valid')
  layout = disjoint.partition_layout(params)
  assert layout.total_params == 44_426  # the HIST code's LeNet, 0.169 MiB
  assert [(g.producer, g.consumer, g.num_units, g.unit_params)
          for g in layout.groups] == [(('fc1',), ('fc2',), 120, 256 + 1 + 84)]
  count = coverage(disjoint_partition(jax.random.PRNGKey(2), params, 3))
  for name in ('conv1', 'conv2', 'head'):
    for leaf in jax.tree.leaves(count[name]):
      np.testing.assert_array_equal(leaf, 3)
  np.testing.assert_array_equal(count['fc2']['bias'], 3)
  for leaf in (count['fc1']['kernel'], count['fc1']['bias'],
               count['fc2']['kernel']):
    np.testing.assert_array_equal(leaf, 1)


def test_deep_stacks_partition_every_second_hidden_layer():
  _, params = params_of('mlp', (8, 8, 1), hidden=(12, 9, 6))
  layout = disjoint.partition_layout(params)
  assert [g.producer for g in layout.groups] == [('fc1',), ('fc3',)]
  count = coverage(disjoint_partition(jax.random.PRNGKey(3), params, 3))
  for layer in ('fc1', 'fc3'):
    np.testing.assert_array_equal(count[layer]['bias'], 1)
  np.testing.assert_array_equal(count['fc2']['kernel'], 1)  # rows by fc1
  np.testing.assert_array_equal(count['fc2']['bias'], 3)    # fc2 is shared
  np.testing.assert_array_equal(count['head']['kernel'], 1)  # rows by fc3


def test_masked_model_is_the_network_of_the_cells_neurons():
  """p_j ⊙ x computes exactly the smaller network on cell j's neurons."""
  model = models.create_model('mlp', 10, hidden=(16,))
  rng = np.random.default_rng(0)  # any values: no init to compile
  params = jax.tree.map(
      lambda s: rng.standard_normal(s.shape).astype(np.float32),
      models.parameter_shapes(model, (8, 8, 1)))
  mask = jax.tree.map(np.asarray,
                      disjoint_partition(jax.random.PRNGKey(4), params, 3)[1])
  x = rng.standard_normal((7, 8, 8, 1)).astype(np.float32)
  masked = jax.tree.map(lambda p, m: p * m, params, mask)
  # The small network in numpy; the masked model's forward as one program.
  keep = np.flatnonzero(mask['fc1']['bias'])
  hidden = np.maximum(x.reshape(7, -1) @ params['fc1']['kernel'][:, keep] +
                      params['fc1']['bias'][keep], 0)
  small = hidden @ params['head']['kernel'][keep] + params['head']['bias']
  np.testing.assert_allclose(jax.jit(model.apply)({'params': masked}, x), small,
                             rtol=1e-5, atol=1e-6)


def test_partitions_are_seeded_fresh_per_key_and_jit_with_given_sizes():
  _, params = params_of('mlp', (8, 8, 1), hidden=(20,))
  draw = jax.jit(lambda key, sizes: disjoint.stacked_partition(
      key, params, 3, sizes)['fc1']['bias'])
  sizes = jnp.asarray([2, 8, 10])
  first = draw(jax.random.PRNGKey(0), sizes)
  np.testing.assert_array_equal(first, draw(jax.random.PRNGKey(0), sizes))
  assert not np.array_equal(first, draw(jax.random.PRNGKey(1), sizes))
  np.testing.assert_array_equal(first.sum(axis=1), [2, 8, 10])
  np.testing.assert_array_equal(first.sum(axis=0), 1)


def test_uniform_sizes_follow_the_authors_code():
  np.testing.assert_array_equal(disjoint.uniform_sizes(300, 4), [75] * 4)
  np.testing.assert_array_equal(disjoint.uniform_sizes(300, 8),
                                [37] * 7 + [41])


def test_bad_partitions_fail_clearly():
  _, params = params_of('mlp', (8, 8, 1), hidden=(5,))
  with pytest.raises(ValueError, match='cannot split 5 hidden neurons into 6'):
    disjoint_partition(jax.random.PRNGKey(0), params, 6)
  with pytest.raises(ValueError, match='summing to the 5 hidden neurons'):
    disjoint_partition(jax.random.PRNGKey(0), params, 2, sizes=[1, 3])
  with pytest.raises(ValueError, match='summing to the 5 hidden neurons'):
    disjoint_partition(jax.random.PRNGKey(0), params, 2, sizes=[0, 5])
  _, linear = params_of('mlp', (8, 8, 1), hidden=())
  with pytest.raises(ValueError, match='no hidden fully connected layer'):
    disjoint.partition_layout(linear)
