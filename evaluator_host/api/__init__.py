"""The FastAPI application."""

from evaluator_host.api.app import create_app

__all__ = ["create_app"]
