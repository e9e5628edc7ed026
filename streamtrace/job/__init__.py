"""Stage 4, the whole job at once, from the analysed folders of all ranks and iterations: the time
alignment of the ranks (:mod:`~streamtrace.job.alignment`), collectives matched across ranks
(:mod:`~streamtrace.job.collectives`) and the job's tables (:mod:`~streamtrace.job.aggregate`,
:func:`aggregate`).
"""
from .aggregate import AggregateOptions, aggregate

__all__ = ["aggregate", "AggregateOptions"]
