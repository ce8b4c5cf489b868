"""`python -m hitl.codec`: print a fresh key in `HITL_ENCRYPTION_KEY` format."""

from hitl.codec import new_key

print(new_key())
