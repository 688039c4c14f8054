"""The dashboard's static files, served by the service itself at ``/ui`` (no build step, no CDN).

The page holds no data: it reads the same JSON API as the CLI, with the token the user types in
(kept in the browser's session storage), so the files themselves are served without a token and
the API's token rules decide what the page may show. Only the files listed in ``FILES`` are served.
"""

from __future__ import annotations

from importlib import resources

from starlette.requests import Request
from starlette.responses import JSONResponse, Response
from starlette.routing import Route

FILES = {"index.html": "text/html; charset=utf-8", "app.js": "text/javascript; charset=utf-8",
         "charts.js": "text/javascript; charset=utf-8", "hours.js": "text/javascript; charset=utf-8",
         "cluster.js": "text/javascript; charset=utf-8", "style.css": "text/css; charset=utf-8"}
PREFIX = "/ui"
HEADERS = {
    "Content-Security-Policy": "default-src 'none'; script-src 'self'; style-src 'self'; connect-src 'self'; "
                               "img-src 'self' data:; base-uri 'none'; form-action 'none'; frame-ancestors 'none'",
    "X-Content-Type-Options": "nosniff",
    "Referrer-Policy": "no-referrer",
    "Cache-Control": "no-cache",
}


def is_ui_path(path: str) -> bool:
    """Whether ``path`` is one of the dashboard's static files (served without a token)."""
    return path in (PREFIX, PREFIX + "/") or (path.startswith(PREFIX + "/") and path[len(PREFIX) + 1:] in FILES)


def _read(name: str) -> bytes:
    return resources.files(__name__).joinpath(name).read_bytes()


async def page(request: Request) -> Response:
    name = request.path_params.get("name", "index.html")
    media = FILES.get(name)
    if media is None:
        return JSONResponse({"error": f"no such file: {request.url.path}"}, status_code=404)
    return Response(_read(name), media_type=media, headers=HEADERS)


def ui_routes() -> list[Route]:
    return [Route(PREFIX, page, methods=["GET"]), Route(PREFIX + "/", page, methods=["GET"]),
            Route(PREFIX + "/{name}", page, methods=["GET"])]
