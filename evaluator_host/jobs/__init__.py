"""Batch jobs: a dataset's rows run through one evaluator, committed as they finish, read back in order.

Four rooms, each with a package docstring saying what it owns and may import, beside what they share:

``datasets/`` the rows a job reads: dataset files (``files``: parsing, the block index), uploads, the
              field mapping (row → case), a comparison's sample rows; imports nothing of the other rooms
``running/``  a job run here: the runner (create, read, wait, cancel, resume), its lanes, the one chunk
              executor, progress, model-target jobs, the result cache's rows, the stored rows written
              (the write side); imports ``datasets/``, never ``results/`` nor ``queue/``
``results/``  a job's results read back (exports), a stored row run again (replay), finished jobs swept
              (retention); imports ``running/`` (the runner) and ``datasets/``
``queue/``    jobs spread over worker hosts (Celery on Redis), which run chunks through ``running/``'s
              executor; never imports ``results/``
``models.py`` the API models of datasets and jobs (the client imports them); ``stored_form.py`` a row's
              result as stored, shared by the write side and the read side (imports no room).

``tests/unit/test_layers.py`` keeps these rules.
"""
