"""The process backend: namespaced subprocesses (the embedded default), its isolation probe and runtimes."""
