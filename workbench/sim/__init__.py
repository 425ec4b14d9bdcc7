"""The embedded engine: a simulated vLLM/SGLang server that needs no GPU.

``kvcache`` (block manager, pure) and ``cost`` (step-time model, pure) feed the
``scheduler`` (pure); ``engine`` steps it on an injected ``Clock`` so the same
core runs behind the HTTP ``server`` (wall clock) and in virtual time.
Importing this package imports nothing heavy: aiohttp loads with ``server``.
"""
