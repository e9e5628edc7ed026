"""How streamtrace uses the processes it runs in: the batch layer that spreads tasks over worker
processes or a dask cluster (:mod:`~streamtrace.runtime.parallel`), forked children
(:mod:`~streamtrace.runtime.fork`), process tuning (:mod:`~streamtrace.runtime.tuning`), atomic
output files (:mod:`~streamtrace.runtime.files`) the warm-up trace that loads numba's compiled
kernels once before workers fork (:mod:`~streamtrace.runtime.warmup`) and compiling the kernels a
command uses ahead, in parallel processes, on a fresh install (:mod:`~streamtrace.runtime.compile`).  Nothing here knows about
traces: every stage above may use it."""
