"""Live intake: `torchci serve`, GitHub webhooks and the relay's downstream callbacks into the archive.

GitHub -> `POST /github/webhook` (HMAC-signed) and downstream CI -> `POST /relay/callback`
(GitHub Actions OIDC) are acknowledged once fsynced to a local spool, then rolled into the
archive (`webhooks/day=D/`, `ci-results/day=D/`) where the ingest and the relay sensor read
them. Nothing here is imported by the lower layers: the archive format is the contract.
"""
