"""Running the OpenAI Agents SDK's own session tests against this package's classes."""
