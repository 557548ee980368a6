"""Communication and storage accounting of federated split learning (CSE-FSL paper, Table II/V).

Units are the paper's (they reproduce Table V exactly): 4 bytes per float32
parameter or activation, GB = 2^30 bytes, labels not counted; storage is the
number of parameters the server holds, including the n client models (+ aux
heads) it keeps for aggregation (Table V; Table II's column omits them).

Per client and round (one local epoch of M batches of B samples, q floats of
smashed data per sample):

    smashed up    uploads · B · q · 4    (uploads = M, or ⌊M/h⌋ for CSE-FSL)
    gradients down  the same when the server returns ∂L/∂smashed (FSL_MC/OC)
    model up/down  (|x_c| [+ |a_c|]) · 4 each way

    storage  FSL_MC n(|x_c|+|x_s|)        FSL_OC |x_s| + n|x_c|
             FSL_AN n(|x_c|+|x_s|+|a|)    CSE-FSL |x_s| + n(|x_c|+|a|)

e.g. CIFAR-10 (n = 5, |D_i| = 10,000, B = 50, 200 epochs): 172.46 GB for
FSL_MC/OC, 86.80 for FSL_AN, 18.14 / 9.55 / 4.40 / 2.69 for h = 5/10/25/50.
"""
import dataclasses
import math

import jax

BYTES_PER_FLOAT = 4
GB = 2**30


@dataclasses.dataclass(frozen=True)
class SplitSizes:
  """Parameter counts of the parts and the smashed floats per sample (q)."""
  client: int
  aux: int
  server: int
  smashed: int

  @classmethod
  def of(cls, params, smashed_shape) -> 'SplitSizes':
    """From a `{'client', 'aux', 'server'}` params tree and the smashed
    data's per-sample shape."""
    count = lambda t: int(sum(x.size for x in jax.tree.leaves(t)))
    return cls(count(params['client']), count(params['aux']),
               count(params['server']), int(math.prod(smashed_shape)))


@dataclasses.dataclass(frozen=True)
class SplitProtocol:
  """What a split method exchanges and stores.

  Attributes:
    returns_gradients: the server sends ∂L/∂smashed back per batch.
    uses_aux: clients train (and exchange) an aux head.
    server_copies: one server model per client (else one shared model).
  """
  returns_gradients: bool
  uses_aux: bool
  server_copies: bool


FSL_MC = SplitProtocol(returns_gradients=True, uses_aux=False,
                       server_copies=True)
FSL_OC = SplitProtocol(returns_gradients=True, uses_aux=False,
                       server_copies=False)
FSL_AN = SplitProtocol(returns_gradients=False, uses_aux=True,
                       server_copies=True)
CSE_FSL = SplitProtocol(returns_gradients=False, uses_aux=True,
                        server_copies=False)


# The bytes a client sends up; they are counted only when its uplink is up.
UPLOADED = ('smashed_bytes_up', 'model_bytes_up')


def client_bytes(protocol: SplitProtocol, sizes: SplitSizes, uploads,
                 batch_size: int) -> dict:
  """Bytes one client exchanges in a round with `uploads` smashed batches.

  `uploads` may be a traced array; returns smashed_bytes_up,
  grad_bytes_down, model_bytes_up, model_bytes_down.
  """
  smashed = uploads * batch_size * sizes.smashed * BYTES_PER_FLOAT
  model = (sizes.client + (sizes.aux if protocol.uses_aux else 0)
           ) * BYTES_PER_FLOAT
  return {'smashed_bytes_up': smashed,
          'grad_bytes_down': smashed if protocol.returns_gradients else 0 * smashed,
          'model_bytes_up': model, 'model_bytes_down': model}


def server_storage(protocol: SplitProtocol, sizes: SplitSizes,
                   clients: int) -> int:
  """Parameters the server holds (Table V): its model(s) and the clients'."""
  per_client = sizes.client + (sizes.aux if protocol.uses_aux else 0)
  servers = clients if protocol.server_copies else 1
  return servers * sizes.server + clients * per_client


def table_v_load_gb(protocol: SplitProtocol, sizes: SplitSizes, *,
                    clients: int, samples_per_client: int, batch_size: int,
                    epochs: int, upload_every: int = 1) -> float:
  """Total load in GB of `epochs` rounds of one local epoch each (Table V)."""
  batches = samples_per_client // batch_size
  per_client = client_bytes(protocol, sizes, batches // upload_every,
                            batch_size)
  return epochs * clients * sum(per_client.values()) / GB
