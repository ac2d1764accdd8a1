"""litellm as this project uses it, set up once per process on import: its cost map read from
the installed package (never fetched online), its console hints and request logging off.

Every module of the stack that calls litellm takes it from here (``from
eval.plumbing.litellm_setup import litellm``), so that a start-up check run before any client
exists (an unknown model's name, say) prints nothing of litellm's own.
"""

from __future__ import annotations

import logging
import os

# Must precede the litellm import: otherwise importing litellm fetches the cost map online.
os.environ.setdefault("LITELLM_LOCAL_MODEL_COST_MAP", "True")

import litellm

# litellm prints hints to stdout and, at DEBUG, logs every request; keep both quiet and keep
# message bodies out of any logging callback. An explicit LITELLM_LOG still wins.
litellm.suppress_debug_info = True
# httpx's own transport, not aiohttp's: litellm caches some of its aiohttp sessions but not all
# (the text-completion path's), and an unclosed one prints "Unclosed client session" at exit
litellm.disable_aiohttp_transport = True
litellm.turn_off_message_logging = True
litellm.log_raw_request_response = False
if "LITELLM_LOG" not in os.environ:
    for _name in ("LiteLLM", "LiteLLM Router", "LiteLLM Proxy"):
        logging.getLogger(_name).setLevel(logging.WARNING)

__all__ = ["litellm"]
