"""Score sinks (issue 52): a rule's scores written into the tracing tool a team already looks at — Phoenix's
span annotations, Langfuse's scores — delivered at least once and recorded once (``delivery.py``)."""
