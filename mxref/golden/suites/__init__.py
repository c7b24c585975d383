"""Golden-file writers, one module per op family (the family of each op: :data:`mxref.ops.OPS`).

Each module has, per op, ``specs_<op>(level)`` (which files exist at a level) and
``build_<op>(spec, cross_check)`` (the file's columns, classes and extra metadata), collected
in its ``WRITERS`` table. The reader side mirrors these modules by file name in
``mxref/verify/checks/``. Shared helpers live below, in :mod:`..columns` and :mod:`..cases`.
"""
