"""Batch jobs: datasets (parsing, uploads), field mapping, the runner and result exports."""
