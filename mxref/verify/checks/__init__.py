"""The per-family checks: ``checks/<family>.py`` reads the files ``golden/suites/<family>.py``
writes (families and ops from :data:`mxref.ops.FAMILIES` / :data:`mxref.ops.OPS`).

Each module has ``RUNNERS``: op name -> ``runner(backend, table, res, rows, profile)``, which
calls the backend on the selected ``rows`` of one golden file and compares every field into
``res`` (a :class:`mxref.verify.compare.FileResult`).
"""
