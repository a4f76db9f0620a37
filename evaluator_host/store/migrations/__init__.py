"""Alembic's environment and the schema's revisions (``versions/``); see docs/database.md."""
