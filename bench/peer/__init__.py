"""The peer: Temporal's OpenAI Agents integration, run from `bench/.peer-venv`."""
