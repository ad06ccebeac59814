"""The proxy process around the requests: our logs on its stderr (``logs``), our clean-up at
shutdown (``shutdown``)."""
