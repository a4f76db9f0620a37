"""Package sets: pins → a resolved lock → a built runtime, built once and shared.

The rule (:mod:`.build_once`), the build sandbox every resolve and install runs in (:mod:`.build_sandbox`),
the installer scripts (:mod:`.installers`), "did you mean" for a failed pin (:mod:`.suggest`) and the
``/v1/runtimes`` resource (:mod:`.catalog`, :mod:`.models`). The backends (``sandbox/process``,
``sandbox/docker``) supply where a runtime lives (a directory, an image) through ``sandbox.base.Builder``.
"""
