"""Package sets: pins → a resolved lock → a built runtime, built once and shared.

The rule (:mod:`.build_once`, its build threads shared fairly by :mod:`.fair_slots`), the build sandbox
every resolve and install runs in (:mod:`.build_sandbox`) and its one way out (:mod:`.build_relay`), the
installer scripts (:mod:`.installers`, npm's own settings and lock in :mod:`.npm`), "did you mean" for a
failed pin (:mod:`.suggest`) and the ``/v1/runtimes`` resource (:mod:`.catalog`, :mod:`.models`). The
backends (``sandbox/process``, ``sandbox/docker``) supply where a runtime lives (a directory, an image)
through ``sandbox.base.Builder``.
"""
