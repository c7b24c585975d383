"""Package list only (everything else is in pyproject.toml): the code packages, found, plus the
two data packages that pyproject's package-dir maps onto golden/ and conformance/expectations/
(a mapped package has no folder under mxref/, so `find` cannot see it)."""
from setuptools import find_packages, setup

setup(packages=find_packages(include=["mxref*", "mxkernels*"])
      + ["mxref._corpus", "mxref._expectations"])
