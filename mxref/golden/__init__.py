"""Golden corpus: coverage-class case generators, Arrow golden files, manifest, drift checks."""
