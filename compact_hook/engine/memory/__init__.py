"""What the engine keeps between requests: the conversations' states in the store (``states``) and
the archive written before anything leaves the model's view (``archiving``)."""
