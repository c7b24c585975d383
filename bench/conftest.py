import numpy as np
import pytest

SHAPE = (8192, 8192)


@pytest.fixture(scope="session")
def x32():
    return np.random.default_rng(0).standard_normal(SHAPE, dtype=np.float32)
