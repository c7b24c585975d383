"""A backend module that raises a non-ImportError while it is imported (a broken plugin).

``mxref verify -b mxref.backends._faulty_import:Backend`` must exit 4 naming the error, not
print a traceback with exit 1.
"""
raise RuntimeError("planted: this backend module fails while it is imported")
