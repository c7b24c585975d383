"""Golden corpus: coverage-class case generators, Arrow golden files, manifest, drift checks.

* :mod:`.cases`: the coverage classes' inputs (E*, S*, L1, R*, H*, NVFP4 tensors);
* :mod:`.suites`: one writer per op family (which files exist, how their columns are computed);
* :mod:`.columns`: what every file shares (coordinates, case ids, leading columns, metadata,
  the generator-source hash); :mod:`.crosscheck`: ml_dtypes / torchao evidence;
* :mod:`.generate`: the driver (write a corpus and its manifest, or regenerate to compare);
* :mod:`.writer`: Arrow writing and the content hash (hashed into the generator source);
* :mod:`.store`: reading and checked opening (keys, size, bytes, content); :mod:`.manifest`:
  validate a manifest, check a corpus, the generate lock (neither hashed: the read side can
  change without regenerating the corpus).
"""
