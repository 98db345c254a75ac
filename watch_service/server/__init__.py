"""The aiohttp service: app factory, auth, error rendering, routes, tailers, metrics."""
