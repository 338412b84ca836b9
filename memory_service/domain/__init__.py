"""The service's own vocabulary, with no storage or transport in it: facts and their filters,
messages and session state, the runtime context of a call (tenant, user, scopes), size limits,
errors and their codes, redaction, token counts and workspace paths. Everything else imports it;
it imports nothing of the service."""
