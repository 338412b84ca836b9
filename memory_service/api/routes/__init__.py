"""API routers, one module per resource."""
