"""A LiteLLM logging callback for tests: writes what LiteLLM's spend tracking would record.

Loaded by a real proxy (``callbacks: [..., tests.integration.spend_probe.probe]``); for every
successful call it builds the SpendLogs row with LiteLLM's own ``get_logging_payload`` and
appends the model group, the key it is charged to and the compression savings LiteLLM's daily
spend writer would read (``extract_compression_saved_tokens``) to ``$SPEND_PROBE_FILE``.
"""

from __future__ import annotations

import json
import os
from typing import Any

from litellm.integrations.custom_logger import CustomLogger
from litellm.proxy.spend_tracking.compression_savings import extract_compression_saved_tokens
from litellm.proxy.spend_tracking.spend_tracking_utils import get_logging_payload


class SpendProbe(CustomLogger):
    async def async_log_success_event(
        self, kwargs: Any, response_obj: Any, start_time: Any, end_time: Any
    ) -> None:
        payload = get_logging_payload(kwargs, response_obj, start_time, end_time)
        metadata = (
            json.loads(payload["metadata"]) if isinstance(payload["metadata"], str) else payload["metadata"]
        )
        line = {
            "model_group": payload.get("model_group"),
            "api_key": payload.get("api_key"),
            "saved": extract_compression_saved_tokens(metadata),
            "compression_savings": metadata.get("compression_savings"),
        }
        with open(os.environ["SPEND_PROBE_FILE"], "a", encoding="utf-8") as file:
            file.write(json.dumps(line) + "\n")


probe = SpendProbe()
