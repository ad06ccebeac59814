"""The LiteLLM edge: ``hook`` (LiteLLM's callbacks, failing open), ``services`` (what the paths
share), ``server`` (the one seam to LiteLLM's proxy), and one folder per path a request takes:
``request`` (the pre-call path), ``answers`` (the proxy's own answers), ``recall`` (the model's
recall calls answered), ``feedback`` (what comes back from the provider), ``observe`` (what
operators are told), ``lifecycle`` (the process around the requests)."""
