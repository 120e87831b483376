"""A fake Bot Framework on 127.0.0.1: the Bot Connector, its token endpoint and its signing keys.

- `GET /openid/<nonce>` is an OpenID metadata document whose `jwks_uri` is `GET /keys`, a JWKS
  holding the public half of an RSA key made here (botframework-connector caches metadata by
  URL for a day, so each fake's URL is new). `fake.token(...)` signs a Bot Framework JWT with
  that key; `fake.forged(...)` signs the same claims with a key nobody published.
- `POST /oauth/token`: the client-credentials grant; answers `fake.bot_token` for the right
  app id and password, 401 otherwise.
- `POST /{region}/v3/conversations/{conversation}/activities[/{reply_to}]`: records each
  message with the region (service URL) it came to (the bearer token must be the bot token)
  and answers its id (`service_url` is /amer/'s, `service_url_of("emea")` another's);
  `fake.script(conversation, "429", "403", "500")` makes the next calls to that conversation
  answer otherwise.
- `GET /amer/v3/attachments/{id}/views/original`: `fake.files[id]`, with the bot token only.
"""

from __future__ import annotations

import itertools
import threading
import time
import uuid
from collections import defaultdict, deque
from dataclasses import dataclass, field
from typing import Any
from urllib.parse import parse_qs

import jwt
from cryptography.hazmat.primitives.asymmetric import rsa
from jwt.algorithms import RSAAlgorithm
from starlette.applications import Starlette
from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

from tests.fakes.server import Served

ISSUER = "https://api.botframework.com"
REGION = "amer"


def _key() -> rsa.RSAPrivateKey:
    return rsa.generate_private_key(public_exponent=65537, key_size=2048)


@dataclass
class Posted:
    conversation: str
    reply_to: str | None
    body: dict[str, Any]
    authorization: str
    ok: bool = False
    region: str = REGION


@dataclass
class FakeBotConnector:
    app_id: str
    password: str
    bot_token: str = field(default_factory=lambda: f"bot-token-{uuid.uuid4().hex}")
    posted: list[Posted] = field(default_factory=list)
    files: dict[str, tuple[bytes, str]] = field(default_factory=dict)
    downloads: list[str] = field(default_factory=list)
    token_requests: int = 0
    key_fetches: int = 0
    scripts: dict[str, deque[str]] = field(default_factory=lambda: defaultdict(deque))
    served: Served | None = None
    _key: rsa.RSAPrivateKey = field(default_factory=_key)
    _kid: str = field(default_factory=lambda: uuid.uuid4().hex)
    _nonce: str = field(default_factory=lambda: uuid.uuid4().hex)
    _ids: Any = field(default_factory=lambda: itertools.count(1))
    _lock: threading.Lock = field(default_factory=threading.Lock)

    # --- addresses ---

    @property
    def base(self) -> str:
        assert self.served is not None
        return self.served.base

    @property
    def service_url(self) -> str:
        return self.service_url_of(REGION)

    def service_url_of(self, region: str) -> str:
        return f"{self.base}/{region}/"

    @property
    def openid_metadata(self) -> str:
        return f"{self.base}/openid/{self._nonce}"

    @property
    def token_endpoint(self) -> str:
        return f"{self.base}/oauth/token"

    def settings(self) -> dict[str, str]:
        """The environment a hermes configured against this fake needs."""
        return {
            "HERMES_PLATFORMS__TEAMS__TOKEN": self.password,
            "HERMES_PLATFORMS__TEAMS__APP_ID": self.app_id,
            "HERMES_PLATFORMS__TEAMS__API_BASE": self.service_url,
            "HERMES_PLATFORMS__TEAMS__TOKEN_ENDPOINT": self.token_endpoint,
            "HERMES_PLATFORMS__TEAMS__OPENID_METADATA": self.openid_metadata,
        }

    # --- tokens the Bot Framework would sign ---

    def claims(self, **changes: Any) -> dict[str, Any]:
        now = int(time.time())
        claims = {
            "iss": ISSUER,
            "aud": self.app_id,
            "serviceurl": self.service_url,
            "nbf": now - 10,
            "exp": now + 3600,
        }
        claims.update(changes)
        return claims

    def token(self, **changes: Any) -> str:
        return jwt.encode(self.claims(**changes), self._key, "RS256", headers={"kid": self._kid})

    def forged(self, **changes: Any) -> str:
        """The same claims and key id, signed with a key the metadata does not publish."""
        return jwt.encode(self.claims(**changes), _key(), "RS256", headers={"kid": self._kid})

    # --- what was sent ---

    def sent(self, conversation: str | None = None) -> list[Posted]:
        with self._lock:
            return [
                p
                for p in self.posted
                if p.ok and (conversation is None or p.conversation == conversation)
            ]

    def texts(self, conversation: str | None = None) -> list[str]:
        return [str(p.body.get("text")) for p in self.sent(conversation)]

    def script(self, conversation: str, *answers: str) -> None:
        with self._lock:
            self.scripts[conversation].extend(answers)

    # --- routes ---

    async def metadata(self, request: Request) -> Response:
        return JSONResponse(
            {
                "issuer": ISSUER,
                "authorization_endpoint": f"{self.base}/oauth/authorize",
                "jwks_uri": f"{self.base}/keys",
                "id_token_signing_alg_values_supported": ["RS256"],
                "token_endpoint_auth_methods_supported": ["private_key_jwt"],
            }
        )

    async def keys(self, request: Request) -> Response:
        with self._lock:
            self.key_fetches += 1
        jwk = RSAAlgorithm.to_jwk(self._key.public_key(), as_dict=True)
        jwk.update({"kid": self._kid, "use": "sig", "endorsements": ["msteams"]})
        return JSONResponse({"keys": [jwk]})

    async def oauth(self, request: Request) -> Response:
        form = {k: v[0] for k, v in parse_qs((await request.body()).decode()).items()}
        with self._lock:
            self.token_requests += 1
        if (
            form.get("grant_type") != "client_credentials"
            or form.get("client_id") != self.app_id
            or form.get("client_secret") != self.password
        ):
            return JSONResponse({"error": "invalid_client"}, status_code=401)
        body = {"token_type": "Bearer", "expires_in": 3599, "access_token": self.bot_token}
        return JSONResponse(body)

    def _authorised(self, request: Request) -> bool:
        return request.headers.get("authorization") == f"Bearer {self.bot_token}"

    async def activities(self, request: Request) -> Response:
        if not self._authorised(request):
            return JSONResponse({"message": "Authorization has been denied"}, status_code=401)
        conversation = request.path_params["conversation"]
        body = await request.json()
        posted = Posted(
            conversation,
            request.path_params.get("reply_to"),
            body,
            request.headers.get("authorization", ""),
            region=request.path_params["region"],
        )
        with self._lock:
            self.posted.append(posted)
            script = self.scripts[conversation]
            answer = script.popleft() if script else "ok"
        if answer == "429":
            return JSONResponse(
                {"error": {"code": "Throttled", "message": "Too many requests"}},
                status_code=429,
                headers={"Retry-After": "1"},
            )
        if answer in ("403", "404", "500"):
            code = {"403": "BotNotInConversationRoster", "404": "ConversationNotFound"}
            error = {"code": code.get(answer, "ServiceError"), "message": "refused"}
            return JSONResponse({"error": error}, status_code=int(answer))
        with self._lock:
            posted.ok = True
            number = next(self._ids)
        return JSONResponse({"id": f"17333{number:08d}"}, status_code=201)

    async def attachment(self, request: Request) -> Response:
        if not self._authorised(request):
            return Response(status_code=401)
        found = request.path_params["attachment"]
        if found not in self.files:
            return Response(status_code=404)
        with self._lock:
            self.downloads.append(found)
        data, mime = self.files[found]
        return Response(data, media_type=mime)

    def app(self) -> Starlette:
        conversations = "/{region}/v3/conversations/{conversation}/activities"
        return Starlette(
            routes=[
                Route(f"/openid/{self._nonce}", self.metadata),
                Route("/keys", self.keys),
                Route("/oauth/token", self.oauth, methods=["POST"]),
                Route(conversations, self.activities, methods=["POST"]),
                Route(conversations + "/{reply_to}", self.activities, methods=["POST"]),
                Route(f"/{REGION}/v3/attachments/{{attachment}}/views/original", self.attachment),
            ]
        )

    def __enter__(self) -> FakeBotConnector:
        self.served = Served(self.app())
        self.served.start()
        return self

    def __exit__(self, *exc: object) -> None:
        assert self.served is not None
        self.served.stop()
