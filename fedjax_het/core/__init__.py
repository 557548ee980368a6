"""The engine: state pytrees, client update, client-axis backends, aggregation, rounds."""
from fedjax_het.core.aggregation import masked_mean, masked_segment_mean
from fedjax_het.core.backends import BACKENDS, ClientError
from fedjax_het.core.client import make_client_update, sgd_factory
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import (ClientOutput, ClientPlan, ServerState,
                                   StepContext)

__all__ = [
    'BACKENDS', 'ClientError', 'ClientOutput', 'ClientPlan', 'RoundRunner',
    'ServerState', 'StepContext', 'make_client_update', 'masked_mean', 'masked_segment_mean',
    'sgd_factory',
]
