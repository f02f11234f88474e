"""The API's paths, which the server (``routes``) and the client (``client``) share.

Standard library only: the client, and the command-line client's own distribution (clients/python), take them
from here without importing the server's routes and their authorization.
"""

from __future__ import annotations

from typing import Final

PREFIX: Final = "/v1"
OPENAPI_PATH: Final = PREFIX + "/openapi.json"
