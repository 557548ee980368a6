"""The engine: state pytrees, client programs and drivers, aggregation, rounds."""
from fedjax_het.core.aggregation import (masked_mean, masked_segment_mean,
                                         segment_sums)
from fedjax_het.core.backends import BACKENDS, ClientError, Clients
from fedjax_het.core.program import (Batch, ClientProgram, LocalModel,
                                     run_program, sequence, sgd_factory,
                                     sgd_program)
from fedjax_het.core.rounds import RoundRunner
from fedjax_het.core.state import (ClientOutput, ClientPlan, ServerState,
                                   StepContext, round_key)

__all__ = [
    'BACKENDS', 'Batch', 'ClientError', 'ClientOutput', 'ClientPlan',
    'ClientProgram', 'Clients', 'LocalModel', 'RoundRunner', 'ServerState',
    'StepContext', 'masked_mean', 'masked_segment_mean', 'round_key',
    'run_program', 'segment_sums', 'sequence', 'sgd_factory', 'sgd_program',
]
