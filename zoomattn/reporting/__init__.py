"""Reports, one package per study (``opamp``, ``rectification``, ``mudaf``, ``lkg``) and one for
the cross-method report (``leaderboard``), all built from the metric files alone.

Each package exposes ``build_report(spec, inputs, out)`` (``inputs``: kind -> the loaded JSON of
its files, ``common/inputs.py``) and ``KINDS``, the kinds it reads; the report stage finds it by
the study's name, so a new study's report is one new folder. A study package imports only
``common/``; the cross-method report reads the papers' rows and published numbers through what
each paper package's ``__init__`` exports.
"""
