"""How streamtrace uses the processes it runs in: the batch layer that spreads tasks over worker
processes or a dask cluster (``parallel``), forked children
(``fork``), how processes end -- SIGTERM as an orderly exit, workers that
die with their parent (``lifecycle``) --, process tuning
(``tuning``), atomic output files and folders, owner-named temporaries and
their clean-up, output path errors (``files``) and the warm-up trace that
loads numba's compiled kernels once before workers fork (``warmup``), and
compiling the kernels a command uses ahead, in parallel processes, on a fresh install
(``compile``).
Nothing here knows about traces: every stage above may use it."""
