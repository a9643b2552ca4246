"""The docs: the README is the first five minutes, the MkDocs site over docs/ the path from there.

`mkdocs build --strict` with every link and anchor validated (mkdocs.yml's `validation:`)
is what `make test` runs here; acklab's own pages job publishes the same build under docs/.
"""

from __future__ import annotations

import re
import shlex
import subprocess
import sys
import warnings
from pathlib import Path

import pytest
import yaml

from acklab.cli import main
from acklab.evidence.exitcodes import ExitCode

ROOT = Path(__file__).resolve().parents[1]
README = ROOT / "README.md"


def build(project: Path, site: Path) -> subprocess.CompletedProcess[str]:
    return subprocess.run(
        [
            sys.executable,
            "-m",
            "mkdocs",
            "build",
            "--strict",
            "-f",
            str(project / "mkdocs.yml"),
            "-d",
            str(site),
        ],
        capture_output=True,
        text=True,
        timeout=120,
        check=False,
    )


def nav_pages(nav: list[object]) -> list[str]:
    pages: list[str] = []
    for entry in nav:
        value = next(iter(entry.values())) if isinstance(entry, dict) else entry
        pages += nav_pages(value) if isinstance(value, list) else [str(value)]
    return pages


@pytest.fixture(scope="module")
def site(tmp_path_factory: pytest.TempPathFactory) -> Path:
    """The site as `make test` and the pages job build it."""
    where = tmp_path_factory.mktemp("docs") / "site"
    done = build(ROOT, where)
    assert done.returncode == 0, done.stderr
    return where


def test_the_docs_site_builds_strict_with_every_page_in_its_nav(site: Path) -> None:
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    pages = nav_pages(config["nav"])
    assert sorted(pages) == sorted(p.name for p in (ROOT / "docs").glob("*.md")), "a page outside the nav"
    for page in pages:
        html = (site / page.replace(".md", ".html")).read_text(encoding="utf-8")
        assert "<h1" in html, page
    # bench/readme.py writes the performance table here; the built page carries it
    assert "make test wall time" in (site / "performance.html").read_text(encoding="utf-8")


def test_a_broken_anchor_or_link_fails_the_strict_build(tmp_path: Path) -> None:
    # acklab's own `validation:` settings on a two-page site (the whole site's build, with its API
    # reference, is seconds of CPU; the test above builds it). One build for both mistakes:
    # --strict fails on any warning, so each mistake reported as a warning of its own is a build it
    # fails alone; the good link beside them must not be reported.
    config = yaml.safe_load((ROOT / "mkdocs.yml").read_text(encoding="utf-8"))
    mistakes = {"[x](cli.md#no-such-heading)": "#no-such-heading", "[x](gone.md)": "'gone.md'"}
    project = tmp_path / "project"
    (project / "docs").mkdir(parents=True)
    (project / "mkdocs.yml").write_text(
        yaml.safe_dump(
            {
                "site_name": "check",
                "docs_dir": "docs",
                "use_directory_urls": config["use_directory_urls"],
                "theme": config["theme"],
                "validation": config["validation"],
            }
        ),
        encoding="utf-8",
    )
    (project / "docs" / "cli.md").write_text("# CLI\n\n## A heading\n", encoding="utf-8")
    (project / "docs" / "index.md").write_text(
        "# Home\n\n[ok](cli.md#a-heading)\n" + "".join(f"\n{m}\n" for m in mistakes), encoding="utf-8"
    )
    done = build(project, project / "site")
    assert done.returncode != 0, f"--strict accepted {list(mistakes)}"
    warnings = [line for line in done.stderr.splitlines() if line.startswith("WARNING")]
    for mistake, expected in mistakes.items():
        assert [line for line in warnings if expected in line], (mistake, done.stderr)
    assert not [line for line in warnings if "#a-heading" in line], done.stderr
    assert f"Aborted with {len(mistakes)} warnings in strict mode" in done.stdout + done.stderr


def test_the_readme_is_the_short_path_and_its_links_resolve() -> None:
    text = README.read_text(encoding="utf-8")
    lines = text.splitlines()
    assert len(lines) < 200, f"the README has {len(lines)} lines; move reference into docs/"
    # The project's contract: its first lines are what acklab is, then the two commands.
    assert lines[0] == "# acklab", lines[:3]
    assert lines[2].startswith("acklab is "), lines[:3]
    commands = [line.split("#", 1)[0].strip() for line in lines[:10] if line.startswith("make ")]
    assert commands == ["make demo", "make test"], lines[:10]
    anchors: dict[Path, set[str]] = {}
    for target in re.findall(r"\]\(((?!https?:)[^)\s]+)\)", text):
        path, _, anchor = target.partition("#")
        where = (ROOT / path).resolve()
        assert where.exists(), f"README links {target}, which does not exist"
        if anchor:
            headings = anchors.setdefault(where, set(slugs(where)))
            assert anchor in headings, f"README links {target}: no such heading"


def slugs(doc: Path) -> list[str]:
    """The anchors MkDocs (Python-Markdown's toc) gives a page's headings."""
    found = []
    for line in doc.read_text(encoding="utf-8").splitlines():
        if line.startswith("#"):
            found.append(toc_slug(re.sub(r"[`*]", "", line.lstrip("#").strip())))
    return found


def test_pages_publishes_the_docs_beside_the_console(
    site: Path, tmp_path: Path, capsys: pytest.CaptureFixture[str]
) -> None:
    """`acklab pages --docs site`, as acklab's own pages job runs it: the reference under
    docs/, linked from every page's header; a directory that is not a built site is refused."""
    evidence = tmp_path / "out"
    evidence.mkdir()
    public = tmp_path / "public"
    with pytest.raises(SystemExit) as done:
        main(["pages", "--evidence", str(evidence), "--out", str(public), "--docs", str(site)])
    assert done.value.code == 0
    assert (public / "docs" / "index.html").read_bytes() == (site / "index.html").read_bytes()
    assert (public / "docs" / "cli.html").is_file()
    overview = (public / "index.html").read_text(encoding="utf-8")
    assert '<a href="docs/index.html">Docs</a>' in overview
    with pytest.raises(SystemExit) as done:
        main(
            [
                "pages",
                "--evidence",
                str(evidence),
                "--out",
                str(tmp_path / "p2"),
                "--docs",
                str(ROOT / "docs"),
            ]
        )
    assert done.value.code == ExitCode.REFUSED
    assert "is not a built site (no index.html in it)" in capsys.readouterr().err


def shell_commands(doc: Path) -> list[str]:
    """Every `acklab ...` command of a doc's ```sh blocks, continuation lines joined, comments cut."""
    found = []
    for block in re.findall(r"```sh\n(.*?)```", doc.read_text(encoding="utf-8"), flags=re.S):
        joined = re.sub(r"\\\n\s*", " ", block)
        for line in joined.splitlines():
            for part in line.split("#", 1)[0].split("&&"):
                if part.strip().startswith("acklab "):
                    found.append(part.strip())
    return found


def parse(argv: list[str]) -> None:
    """Resolve and parse argv as the CLI would, down to the subcommand, without running it."""
    import click

    from acklab.cli import cli

    command: click.Command = cli
    ctx = command.make_context("acklab", list(argv), resilient_parsing=False)
    while isinstance(command, click.Group):
        with warnings.catch_warnings():  # click 8.2 deprecates the name, 8.1 has only it
            warnings.simplefilter("ignore", DeprecationWarning)
            args = [*ctx.protected_args, *ctx.args]
        name, sub, rest = command.resolve_command(ctx, args)
        assert sub is not None, argv
        command, ctx = sub, sub.make_context(name or "", rest, parent=ctx)


def test_every_acklab_command_in_the_readme_and_docs_parses_as_written() -> None:
    """The commands a reader copies use options and subcommands that exist, with values the
    CLI accepts (a file of the reader's own project may be missing here: not a parse error)."""
    import click

    commands = [c for doc in (README, *sorted((ROOT / "docs").glob("*.md"))) for c in shell_commands(doc)]
    assert len(commands) >= 15, commands
    refused = []
    for line in commands:
        try:
            parse(shlex.split(line)[1:])
        except click.BadParameter as exc:  # a path of the reader's project, e.g. acklab/shop.target.yaml
            if "does not exist" not in str(exc):
                refused.append(f"{line}: {exc}")
        except click.UsageError as exc:
            refused.append(f"{line}: {exc}")
        except click.exceptions.Exit as exc:  # --version, --help: they answer and exit 0
            if exc.exit_code != 0:
                refused.append(f"{line}: exits {exc.exit_code}")
    assert refused == []


# Where code names a page of the docs: docstrings, comments, messages, templates, scripts, and
# the project's own markdown (the package READMEs, the README, the docs pages themselves).
CODE = (
    "acklab",
    "app",
    "harness",
    "evidence",
    "console",
    "flows",
    "bench",
    "scripts",
    "tests",
    "templates",
    "ci",
)
CODE_SUFFIXES = {".py", ".sh", ".yml", ".yaml", ".toml", ".html", ".j2", ".cfg", ".md"}
# A SOURCES.md cites where vendored rules came from: its docs/ paths are another repository's.
CITES_OTHER_REPOSITORIES = "SOURCES.md"
# ``docs/PAGE.md``, ``docs/PAGE.md#anchor`` or ``docs/PAGE.md, "A heading"`` (a section by its title).
DOCS_REFERENCE = re.compile(r'\bdocs/([\w./-]+?\.md)(?:#([\w-]+)|, "([^"]+)")?')


def code_files() -> list[Path]:
    return [
        path
        for folder in CODE
        for path in sorted((ROOT / folder).rglob("*"))
        if path.suffix in CODE_SUFFIXES
        and path.is_file()
        and path.name != CITES_OTHER_REPOSITORIES
        and "data" not in path.relative_to(ROOT).parts[:2]
        and path != Path(__file__)  # its own examples of what is not there
    ] + [
        *sorted((ROOT / "docs").glob("*.md")),
        README,
        ROOT / "ARCHITECTURE.md",
        ROOT / "Makefile",
        ROOT / "pyproject.toml",
        ROOT / "mkdocs.yml",
    ]


def toc_slug(title: str) -> str:
    """The id Python-Markdown's toc (MkDocs' default) gives a heading titled `title`."""
    from markdown.extensions.toc import slugify

    return str(slugify(title, "-"))


def docs_references(files: list[Path]) -> list[tuple[str, str, str | None]]:
    """(where, page, anchor) for every ``docs/PAGE.md``, ``docs/PAGE.md#anchor`` or
    ``docs/PAGE.md, "A heading"`` the files name; a heading named by its title is looked up by
    the anchor MkDocs gives it."""
    found = []
    for path in files:
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1):
            for match in DOCS_REFERENCE.finditer(line):
                shown = path.relative_to(ROOT) if path.is_relative_to(ROOT) else path.name
                anchor = match[2] or (toc_slug(match[3]) if match[3] else None)
                found.append((f"{shown}:{number}", match[1], anchor))
    return found


def unresolved(references: list[tuple[str, str, str | None]], site: Path) -> list[str]:
    """The references whose page is not in the built site, or whose anchor is no id on it."""
    bad = []
    for where, page, anchor in references:
        built = site / page.replace(".md", ".html")
        if not built.is_file():
            bad.append(f"{where}: docs/{page} is no page of the docs")
        elif anchor and f'id="{anchor}"' not in built.read_text(encoding="utf-8"):
            bad.append(f"{where}: docs/{page}#{anchor}: no such heading")
    return bad


def test_every_docs_page_and_anchor_the_code_names_exists(site: Path) -> None:
    references = docs_references(code_files())
    assert len(references) >= 20, references
    assert any(anchor for _, _, anchor in references)
    assert unresolved(references, site) == []


def test_a_reference_to_a_page_or_heading_that_is_not_there_is_found(site: Path, tmp_path: Path) -> None:
    code = tmp_path / "hooks.py"
    code.write_text(
        '"""See docs/concepts.md#precedence, docs/gone.md and docs/cli.md#no-such-heading."""\n'
        '# docs/sinks.md, "Adding a sink" says how; docs/repair.md, "As a Duo flow" is not a heading\n',
        encoding="utf-8",
    )
    notes = tmp_path / "README.md"
    notes.write_text("[the repair](../docs/repair.md#as-a-gitlab-duo-flow), [x](../docs/gone.md#y)\n")
    assert unresolved(docs_references([code, notes]), site) == [
        "hooks.py:1: docs/gone.md is no page of the docs",
        "hooks.py:1: docs/cli.md#no-such-heading: no such heading",
        "hooks.py:2: docs/repair.md#as-a-duo-flow: no such heading",
        "README.md:1: docs/gone.md is no page of the docs",
    ]


def test_no_text_cites_a_readme_section_or_an_internal_issue() -> None:
    """A reader can open a docs page; a README section that moved, or "issue 27" of a tracker
    they cannot see, sends them nowhere (public projects' issues are cited as `Project #N`)."""
    stale = re.compile(r"README(?:\.md)?,? \"[A-Z]|\bissues? #?\d+\b", flags=re.IGNORECASE)
    pages = [*sorted((ROOT / "docs").glob("*.md")), README]
    found = [
        f"{path.relative_to(ROOT)}:{number}: {line.strip()[:80]}"
        for path in [*code_files(), *pages]
        for number, line in enumerate(path.read_text(encoding="utf-8", errors="replace").splitlines(), 1)
        if stale.search(line)
    ]
    assert found == []


def test_the_references_are_generated_from_the_code(site: Path) -> None:
    """The Python API page holds every name `import acklab` exports; the CLI page every command."""
    import acklab
    from acklab.cli import COMMANDS

    api = (site / "api.html").read_text(encoding="utf-8")
    documented = [name for name in acklab.__all__ if not name.startswith("_") and name.isidentifier()]
    missing = [
        name for name in documented if f'id="acklab.{name}"' not in api and name != "DEFAULT_EXPERIMENTS"
    ]
    assert missing == []
    cli = (site / "cli-reference.html").read_text(encoding="utf-8")
    assert [name for name in COMMANDS if f'id="{name}"' not in cli] == []
    assert "--allow-foreign-service" in cli
    assert "--debug" in cli
