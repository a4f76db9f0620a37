"""What wraps every request: authentication, the Host check, body limits, observation, idempotency,
and the fast path."""
