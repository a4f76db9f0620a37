"""The HTTP resources, one module a resource: parse the request, call one use-case function, return a model."""
