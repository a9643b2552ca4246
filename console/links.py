"""Where each view lives: root-relative paths for the live console, relative files for Pages.

Templates only ever ask a Links object for a URL, so the same template renders the live
console and the static snapshot. The snapshot must work under any sub-path
(https://group.gitlab.io/project/), so every link it emits is relative to the page that
holds it, and every page is a file (`index.html`, never a bare directory).
"""

from __future__ import annotations

import posixpath
from urllib.parse import quote, urlencode


def _q(value: str) -> str:
    return quote(value, safe="")


class LiveLinks:
    """URLs of the live console (FastAPI routes)."""

    static_mode = False

    def overview(self, page: int = 1) -> str:
        return "/" if page <= 1 else f"/?page={page}"

    def bundle(self, key: str, page: int = 1) -> str:
        return f"/bundles/{_q(key)}" + (f"?page={page}" if page > 1 else "")

    def incident(self, key: str, incident_id: str, page: int = 1) -> str:
        url = f"/bundles/{_q(key)}/incidents/{_q(incident_id)}"
        return url + (f"?page={page}" if page > 1 else "")

    def trail(self, key: str) -> str:
        return f"/bundles/{_q(key)}/trail"

    def pipeline(self, key: str) -> str:
        return f"/bundles/{_q(key)}/pipeline"

    def pipelines(self, page: int = 1) -> str:
        return "/pipelines" if page <= 1 else f"/pipelines?page={page}"

    def compare_index(self, page: int = 1) -> str:
        return "/compare" + (f"?page={page}" if page > 1 else "")

    def history(self) -> str:
        return "/history"

    def compare(
        self,
        left: str,
        right: str,
        event: str | None = None,
        step: int | None = None,
        *,
        slug: str = "",
        event_index: int = 0,
    ) -> str:
        """A comparison; the event and step live in the query so that a shared link restores the view."""
        query: dict[str, str] = {"left": left, "right": right}
        if event:
            query["event"] = event
        if step:
            query["step"] = str(step)
        return "/compare?" + urlencode(query, safe=":~")

    def raw(self, key: str, rel: str) -> str:
        return f"/raw/{_q(key)}/" + "/".join(_q(part) for part in rel.split("/"))

    def static(self, name: str) -> str:
        return f"/static/{name}"


class StaticLinks:
    """Relative URLs between the files of the Pages snapshot, as seen from `page` (a posix path)."""

    static_mode = True

    def __init__(self, page: str) -> None:
        self.page = page
        self._dir = posixpath.dirname(page) or "."

    def _to(self, target: str) -> str:
        rel = posixpath.relpath(target, self._dir)
        return "/".join(_q(part) if part not in (".", "..") else part for part in rel.split("/"))

    @staticmethod
    def overview_file(page: int = 1) -> str:
        return "index.html" if page <= 1 else f"overview/page-{page}.html"

    @staticmethod
    def bundle_file(key: str, page: int = 1) -> str:
        return f"bundles/{key}/index.html" if page <= 1 else f"bundles/{key}/page-{page}.html"

    @staticmethod
    def compare_index_file(page: int = 1) -> str:
        return "compare/index.html" if page <= 1 else f"compare/page-{page}.html"

    @staticmethod
    def history_file() -> str:
        return "history/index.html"

    @staticmethod
    def incident_file(key: str, incident_id: str, page: int = 1) -> str:
        # Later pages in a folder of the incident's own: no incident id can name one of them.
        if page > 1:
            return f"bundles/{key}/incidents/{incident_id}/page-{page}.html"
        return f"bundles/{key}/incidents/{incident_id}.html"

    @staticmethod
    def trail_file(key: str) -> str:
        return f"bundles/{key}/trail.html"

    @staticmethod
    def pipeline_file(key: str) -> str:
        return f"bundles/{key}/pipeline.html"

    @staticmethod
    def pipelines_file(page: int = 1) -> str:
        return "pipelines/index.html" if page <= 1 else f"pipelines/page-{page}.html"

    @staticmethod
    def compare_file(slug: str, event_index: int) -> str:
        return f"compare/{slug}/event-{event_index + 1}.html"

    @staticmethod
    def compare_entry_file(slug: str) -> str:
        return f"compare/{slug}/index.html"

    @staticmethod
    def raw_file(key: str, rel: str) -> str:
        """Where a bundle's file is published: as inert data, never as active content.

        A static host serves a file by its extension, and a bundle may hold a planted
        ``.html``, ``.svg`` or ``.xml`` whose scripts would run on the Pages origin. So every
        file is published as text (``<name>.txt``, served ``text/plain``), JSON as JSON
        (``application/json``, which no browser runs). Distinct names stay distinct.
        """
        inert = rel if rel.endswith(".json") else f"{rel}.txt"
        return f"raw/{key}/{inert}"

    def overview(self, page: int = 1) -> str:
        return self._to(self.overview_file(page))

    def bundle(self, key: str, page: int = 1) -> str:
        return self._to(self.bundle_file(key, page))

    def incident(self, key: str, incident_id: str, page: int = 1) -> str:
        return self._to(self.incident_file(key, incident_id, page))

    def trail(self, key: str) -> str:
        return self._to(self.trail_file(key))

    def pipeline(self, key: str) -> str:
        return self._to(self.pipeline_file(key))

    def pipelines(self, page: int = 1) -> str:
        return self._to(self.pipelines_file(page))

    def compare_index(self, page: int = 1) -> str:
        return self._to(self.compare_index_file(page))

    def history(self) -> str:
        return self._to(self.history_file())

    def compare(
        self,
        left: str,
        right: str,
        event: str | None = None,
        step: int | None = None,
        *,
        slug: str = "",
        event_index: int = 0,
    ) -> str:
        """A pre-rendered comparison page; the step is an anchor that works without JavaScript.
        Without an event: the pair's entry page, opened where the handlers first differ."""
        rel = self.compare_entry_file(slug) if event is None else self.compare_file(slug, event_index)
        url = self._to(rel)
        return f"{url}#step-{step}" if step else url

    def raw(self, key: str, rel: str) -> str:
        return self._to(self.raw_file(key, rel))

    def docs(self) -> str:
        """The documentation site published beside the snapshot (`acklab pages --docs`)."""
        return self._to("docs/index.html")

    def static(self, name: str) -> str:
        return self._to(f"static/{name}")


Links = LiveLinks | StaticLinks
