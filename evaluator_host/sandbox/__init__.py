"""Where user code runs: the backend Protocol, the frame protocol, the one worker pool, build-once,
and one folder per backend (``process/``, ``docker/``)."""
