"""Secrets and keys, in one home: credentials in names and URLs, redaction of everything a run
writes, which API keys a model needs and what a keyless server is sent."""
