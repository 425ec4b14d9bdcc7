"""What the embedded engine's ``/v1/models`` card says of itself: the names the server
that writes it (``sim.server``) and the client that reads it (``backends.served``) share,
below both as the layers require (docs/embedded-engine.md, "Which step times")."""

from __future__ import annotations

__all__ = ["SIM_CARD_KEY", "SIM_OWNER"]

#: a card's ``owned_by`` when ``workbench sim serve`` answers
SIM_OWNER = "workbench-sim"
#: the card's key holding what it simulates (``{"version": ..., "engine": {...}}``)
SIM_CARD_KEY = "workbench_sim"
