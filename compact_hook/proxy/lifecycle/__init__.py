"""The proxy process around the requests: start-up checks (``startup``), our logs on its stderr
(``logs``), our clean-up at shutdown (``shutdown``)."""
