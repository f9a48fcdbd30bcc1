"""Built-in plugins, one module per plugin (family); `policies.framework.registry` lists them."""
