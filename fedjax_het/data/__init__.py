"""Federated data: dataset sources, label partitioners, naturally partitioned sets
(`load_natural`: the files' writers, speakers or users as clients) and the padded per-client
layout.

Note: `fedjax_het.data.partition` is the partition dispatcher function; import partitioner
helpers from the module with `from fedjax_het.data.partition import dirichlet`.
"""

from fedjax_het.data.federated import CohortData, FederatedData, RaggedData
from fedjax_het.data.federated import open_ragged, write_ragged
from fedjax_het.data.federated import FederatedSplit
from fedjax_het.data.federated import build_federated
from fedjax_het.data.federated import client_label_histogram
from fedjax_het.data.federated import pack_clients
from fedjax_het.data.natural import NATURAL_DATASETS
from fedjax_het.data.natural import load_natural
from fedjax_het.data.partition import PARTITIONS
from fedjax_het.data.partition import balanced_dirichlet
from fedjax_het.data.partition import dirichlet
from fedjax_het.data.partition import iid
from fedjax_het.data.partition import class_blocks
from fedjax_het.data.partition import one_class_per_client
from fedjax_het.data.partition import partition
from fedjax_het.data.partition import quantity_skew
from fedjax_het.data.partition import sample_by_priors
from fedjax_het.data.partition import shards
from fedjax_het.data.partition import split_by_class_shares
from fedjax_het.data.sources import DATASETS
from fedjax_het.data.sources import ArrayDataset
from fedjax_het.data.sources import load_dataset

__all__ = [
    'ArrayDataset', 'CohortData', 'DATASETS', 'FederatedData', 'FederatedSplit', 'NATURAL_DATASETS',
    'RaggedData', 'open_ragged', 'write_ragged',
    'PARTITIONS',
    'balanced_dirichlet', 'build_federated', 'class_blocks', 'client_label_histogram', 'dirichlet', 'iid',
    'load_dataset', 'load_natural', 'one_class_per_client', 'pack_clients', 'partition', 'quantity_skew',
    'sample_by_priors', 'shards', 'split_by_class_shares',
]
