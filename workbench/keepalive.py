"""How long a pooled HTTP connection may sit idle and still be reused: one bound for the
replay's clients (``executor.connection_idle_s``) and the capture proxy's upstream side.

A server closes a keep-alive connection idle past its own timeout; a request written on
it as it does is lost before the server reads it (docs/wire-protocols.md, "Idle
connections"). The bound sits below the engines' servers' keep-alive: 5 s for vLLM
(``VLLM_HTTP_TIMEOUT_KEEP_ALIVE``, uvicorn), SGLang (uvicorn, ``timeout_keep_alive=5``)
and llama.cpp's llama-server (cpp-httplib's ``CPPHTTPLIB_KEEPALIVE_TIMEOUT_SECOND``);
the second left covers the answer's last bytes in flight and a loaded loop.
"""

from __future__ import annotations

__all__ = ["CONNECTION_IDLE_S"]

#: seconds; a connection idle longer is closed, not reused
CONNECTION_IDLE_S = 4.0
