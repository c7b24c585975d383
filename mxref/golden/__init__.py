"""Golden corpus: coverage-class case generators, Arrow golden files, manifest, drift checks.

* :mod:`.cases`: the coverage classes' inputs (E*, S*, L1, R*, H*, NVFP4 tensors);
* :mod:`.suites`: one writer per op family (which files exist, how their columns are computed);
* :mod:`.columns`: what every file shares (coordinates, case ids, leading columns, metadata,
  the generator-source hash); :mod:`.crosscheck`: ml_dtypes / torchao evidence;
* :mod:`.generate`: the driver (write a corpus and its manifest, or regenerate to compare);
* :mod:`.manifest`: read a manifest and check a committed corpus; :mod:`.store`: Arrow I/O.
"""
