"""schemathesis hooks for hearth's OpenAPI run (tests/schemathesis/run.sh).

NIP-86 bodies are JSON under their own media type, application/nostr+json+rpc: sent as JSON.
"""

import schemathesis

schemathesis.serializer.alias("application/nostr+json+rpc", "application/json")
