"""The HTTP API: one Starlette app, routes contributed by each capability."""
