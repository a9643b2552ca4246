"""A user's shop as a repository of its own: ``repo/`` (its files, the bug committed on ``main``) and
``fixed/`` (the file a maintainer would change, fixed), copied out and committed for a test.

    SHOP = ShopRepo(Path(__file__).parent, "shop/hooks.py", author=..., message=...)
    repo = SHOP.make(tmp_path / "shop")              # the buggy handler, committed on main
    repo = SHOP.make(tmp_path / "shop", fixed=True)
    diff = SHOP.fix_diff(repo)                       # what a model answers
"""

from __future__ import annotations

import shutil
from dataclasses import dataclass
from pathlib import Path

from tests.consumers.user_repos import commit_all, git


@dataclass(frozen=True)
class ShopRepo:
    """One shop's files (`here`/repo, `here`/fixed) and the handler file a repair changes (`view`)."""

    here: Path
    view: str
    author: str
    message: str

    @property
    def fixed_view(self) -> str:
        return (self.here / "fixed" / self.view).read_text(encoding="utf-8")

    def make(self, directory: Path, *, fixed: bool = False) -> Path:
        """Copy the shop into `directory` (the fixed handler with `fixed`) and commit it on ``main``."""
        ignored = shutil.ignore_patterns("__pycache__", "*.pyc", "*.db", "db.sqlite3", ".acklab")
        shutil.copytree(self.here / "repo", directory, ignore=ignored)
        if fixed:
            (directory / self.view).write_text(self.fixed_view, encoding="utf-8")
        return commit_all(directory, self.author, self.message)

    def fix_diff(self, directory: Path) -> str:
        """The unified diff (as git writes it) that turns the shop's handler into the fixed twin."""
        path = directory / self.view
        original = path.read_text(encoding="utf-8")
        try:
            path.write_text(self.fixed_view, encoding="utf-8")
            return git(directory, "diff", "--", self.view) + "\n"
        finally:
            path.write_text(original, encoding="utf-8")
