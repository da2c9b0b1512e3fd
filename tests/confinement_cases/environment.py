"""Prints its environment."""
import json
import os

print(json.dumps(dict(os.environ)))
