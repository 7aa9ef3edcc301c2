"""The docs tell the truth about the repository: every relative link in its Markdown resolves (the
file, and for ``#anchor`` the heading), every ``rescue ...`` command line they show parses against
the real Typer app (its command path and options, with ``--help`` rendered for each path), every
``benchmarks/bench_*.py --option`` they show exists, the data root's map in ``pipeline/paths.py``
names every folder ``DataRoot`` makes, and no guide carries lab notes (dated entries, commit
hashes, issue or session numbers): git keeps the history."""
from __future__ import annotations

import os
import re
import shlex
from dataclasses import dataclass
from functools import lru_cache
from pathlib import Path

import typer.main
from typer.testing import CliRunner

from pipeline.config import REPO_ROOT

SKIP_DIRS = {"data", "models", "build", "test-output", "node_modules", "__pycache__"}


@lru_cache(maxsize=1)
def markdown_files() -> tuple[Path, ...]:
    """The repository's own Markdown: not environments, data, models or hidden folders."""
    found = []
    for folder, dirs, files in os.walk(REPO_ROOT):
        dirs[:] = sorted(d for d in dirs if not (d.startswith(".") or d in SKIP_DIRS or d.endswith(".egg-info")))
        found += [Path(folder) / f for f in files if f.endswith(".md")]
    return tuple(sorted(found))


@dataclass(frozen=True)
class Parsed:
    prose: str                      # the text outside fenced code blocks, code spans blanked out
    code_lines: tuple[str, ...]     # lines of fenced code blocks
    code_spans: tuple[str, ...]     # inline `code` outside fenced blocks, whitespace collapsed
    headings: tuple[str, ...]


def parse_markdown(text: str) -> Parsed:
    prose, code, headings = [], [], []
    fence = None
    for line in text.splitlines():
        stripped = line.lstrip()
        marker = re.match(r"(`{3,}|~{3,})", stripped)
        if marker and (fence is None or stripped.startswith(fence)):
            fence = marker.group(1) if fence is None else None
            continue
        if fence is not None:
            code.append(line)
            continue
        prose.append(line)
        heading = re.match(r"#{1,6}\s+(.*?)\s*#*\s*$", line)
        if heading:
            headings.append(heading.group(1))
    body = "\n".join(prose)
    spans = tuple(" ".join(s.split()) for s in re.findall(r"(?<!`)`([^`]+)`(?!`)", body))
    return Parsed(re.sub(r"(?<!`)`[^`]+`(?!`)", "``", body), tuple(code), spans, tuple(headings))


def anchor(heading: str) -> str:
    """GitHub's anchor of a heading: lower case, markup and punctuation dropped, spaces to ``-``."""
    text = re.sub(r"\[([^\]]*)\]\([^)]*\)", r"\1", heading)
    text = re.sub(r"[`*]", "", text).strip().lower()
    return re.sub(r"[^\w\- ]", "", text).replace(" ", "-")


def anchors(path: Path) -> set[str]:
    seen: dict[str, int] = {}
    out = set()
    for heading in parse_markdown(path.read_text(encoding="utf-8")).headings:
        base = anchor(heading)
        n = seen.get(base, 0)
        seen[base] = n + 1
        out.add(base if n == 0 else f"{base}-{n}")
    return out


LINK = re.compile(r"!?\[[^\]]*\]\(\s*([^)\s]+)(?:\s+\"[^\"]*\")?\s*\)")


def broken_links(path: Path) -> list[str]:
    problems = []
    for target in LINK.findall(parse_markdown(path.read_text(encoding="utf-8")).prose):
        if re.match(r"[a-z][a-z0-9+.-]*:", target):        # http:, https:, mailto: ...
            continue
        file_part, _, fragment = target.partition("#")
        dest = (path.parent / file_part).resolve() if file_part else path
        where = f"{path.relative_to(REPO_ROOT)}: link {target!r}"
        if not dest.is_relative_to(REPO_ROOT):
            problems.append(f"{where} points outside the repository")
        elif not dest.exists():
            problems.append(f"{where}: {file_part} does not exist")
        elif fragment and dest.suffix == ".md" and fragment not in anchors(dest):
            problems.append(f"{where}: no heading #{fragment} in {dest.relative_to(REPO_ROOT)}")
    return problems


# --- rescue command lines --------------------------------------------------------------

RESCUE = re.compile(r"(?:^|(?<=[\s(\"'`=]))(?:\./)?(?:\.venv/bin/)?rescue\s+(.*)")


def command_lines(text: str) -> list[tuple[str, bool]]:
    """``(the words after 'rescue', complete)`` for each rescue command in fenced code (complete:
    a line to run as it stands) and in inline code (a mention, placeholders allowed)."""
    parsed = parse_markdown(text)
    found = []
    for source, complete in [(parsed.code_lines, True), (parsed.code_spans, False)]:
        for line in source:
            for match in RESCUE.finditer(line):
                rest = re.split(r"\s#|\)|\"|;|&&|\s\|\s|`|\s\d?>>?|\s<\s", match.group(1))[0].strip()
                found.append((rest, complete))
    return found


@lru_cache(maxsize=1)
def root_command():
    """The ``rescue`` app as Typer's command tree (Typer carries its own copy of click, so the
    tree is read by duck typing: a group has ``commands``)."""
    from ops.cli import app
    return typer.main.get_command(app)


def _words(rest: str) -> list[str]:
    try:
        words = shlex.split(rest)
    except ValueError:
        words = rest.split()
    words = [w.strip("[]") for w in words]
    return [w for w in words if w and w not in ("...", "…", "|")]


def check_command(rest: str, complete: bool) -> tuple[list[str], str | None]:
    """The command path it names, and what is wrong with the line (None: it parses)."""
    words = _words(rest)
    command = root_command()
    path: list[str] = []
    while hasattr(command, "commands") and words and not words[0].startswith("-"):
        names = words[0].split("|")
        missing = [n for n in names if n not in command.commands]
        if missing:
            return path, f"no command {' '.join(['rescue', *path, missing[0]])}"
        path.append(names[0])
        command = command.commands[names[0]]
        words = words[1:]
    if hasattr(command, "commands"):
        if words:
            return path, f"{' '.join(['rescue', *path])} is a group: {words[0]} is no command of it"
        return path, None
    ctx = command.context_class(command, info_name=" ".join(["rescue", *path]))
    options = {o for p in command.params if p.param_type_name == "option" for o in (*p.opts, *p.secondary_opts)}
    options.add("--help")
    for word in words:
        if word.startswith("-") and len(word) > 1 and not re.fullmatch(r"-\d.*", word):
            for alternative in word.split("|"):
                if alternative.split("=", 1)[0] not in options:
                    return path, f"rescue {' '.join(path)} has no option {alternative}"
    if not complete:
        return path, None
    try:
        values, extra, _ = command.make_parser(ctx).parse_args(list(words))
    except Exception as exc:  # click's UsageError (Typer's copy of click)
        if not hasattr(exc, "format_message"):
            raise
        return path, exc.format_message()
    if extra:
        return path, f"more arguments than it takes: {' '.join(extra)}"
    missing = [(p.name or "").upper() for p in command.params
               if p.param_type_name == "argument" and p.required and values.get(p.name) in (None, ())]
    if missing:
        return path, f"missing argument {', '.join(missing)}"
    return path, None


def _documents() -> list[Path]:
    return markdown_files()


def test_the_docs_are_found():
    names = {p.relative_to(REPO_ROOT).as_posix() for p in _documents()}
    assert {"README.md", "docs/OPERATIONS.md", "docs/SCALING.md", "benchmarks/README.md",
            "CHANGELOG.md"} <= names


def test_every_relative_link_resolves():
    problems = [p for path in _documents() for p in broken_links(path)]
    assert not problems, "\n".join(problems)


def test_every_rescue_command_line_parses():
    problems, paths = [], set()
    for path in _documents():
        for rest, complete in command_lines(path.read_text(encoding="utf-8")):
            named, problem = check_command(rest, complete)
            paths.add(tuple(named))
            if problem:
                problems.append(f"{path.relative_to(REPO_ROOT)}: `rescue {rest}`: {problem}")
    assert not problems, "\n".join(problems)
    # each command path the docs name shows its help (the real app, in-process)
    runner = CliRunner()
    from ops.cli import app
    for named in sorted(paths):
        result = runner.invoke(app, [*named, "--help"])
        assert result.exit_code == 0, f"rescue {' '.join(named)} --help: {result.output}"


def test_every_benchmark_option_shown_exists():
    problems = []
    for path in _documents():
        parsed = parse_markdown(path.read_text(encoding="utf-8"))
        for line in (*parsed.code_lines, *parsed.code_spans):
            for script, rest in re.findall(r"(benchmarks/\w+\.py)([^`#;|]*)", line):
                source = REPO_ROOT / script
                if not source.is_file():
                    problems.append(f"{path.relative_to(REPO_ROOT)}: {script} does not exist")
                    continue
                text = source.read_text(encoding="utf-8")
                for option in re.findall(r"(?<![\w-])(--[a-z][\w-]*)", rest):
                    if f'"{option}"' not in text:
                        problems.append(f"{path.relative_to(REPO_ROOT)}: {script} has no option {option}")
    assert not problems, "\n".join(problems)


LAB_NOTES = [
    (re.compile(r"\bsession \d", re.I), "a session number"),
    (re.compile(r"\bissue #\d|(?<![\w/&#])#\d{1,5}\b", re.I), "an issue number"),
    (re.compile(r"\b20\d\d-[01]\d-[0-3]\d\b"), "a date"),
    (re.compile(r"`(?=[0-9a-f]*[a-f])(?=[0-9a-f]*\d)[0-9a-f]{7,40}`"), "a commit hash"),
]


def test_no_lab_notes_in_the_docs():
    problems = []
    for path in _documents():
        for number, line in enumerate(path.read_text(encoding="utf-8").splitlines(), 1):
            for pattern, what in LAB_NOTES:
                if pattern.search(line):
                    problems.append(f"{path.relative_to(REPO_ROOT)}:{number}: {what}: {line.strip()[:100]}")
    assert not problems, "lab notes belong in git, not in the guides:\n" + "\n".join(problems)


def test_scaling_guide_stays_a_guide():
    lines = (REPO_ROOT / "docs" / "SCALING.md").read_text(encoding="utf-8").count("\n")
    assert lines <= 300, f"docs/SCALING.md has {lines} lines (at most 300: a guide, not a notebook)"


def test_every_benchmark_is_described():
    text = (REPO_ROOT / "benchmarks" / "README.md").read_text(encoding="utf-8")
    headings = set(parse_markdown(text).headings)
    missing = [p.name for p in sorted((REPO_ROOT / "benchmarks").glob("bench_*.py")) if f"`{p.name}`" not in headings]
    assert not missing, f"benchmarks/README.md has no section for: {', '.join(missing)}"


def test_the_data_root_map_names_every_folder():
    source = (REPO_ROOT / "pipeline" / "paths.py").read_text(encoding="utf-8")
    doc = source.split('"""', 2)[1]
    entries = {line.split()[0] for line in doc.splitlines() if line.startswith("    ") and line.split()}
    made = set()
    for call in re.findall(r"_inside\(([^)]*)\)", source):
        literals = re.findall(r'^\s*"([\w.-]+)"(?:,\s*"([\w.-]+)")?', call)
        if literals:
            first, second = literals[0]
            made.add(first if not second or first != "annotation" else f"{first}/{second}")
    for module in (REPO_ROOT / "pipeline").rglob("*.py"):
        made |= {f"annotation/{name}" for name in
                 re.findall(r'annotation_dir\(\)\s*/\s*"([\w.-]+)"', module.read_text(encoding="utf-8"))}
    missing = sorted(m for m in made if not any(e == m or e.startswith((m + "/", m + ".", m + "{")) for e in entries))
    assert not missing, f"pipeline/paths.py's map of the data root does not name: {', '.join(missing)}"


# --- the checks themselves catch what they are for -------------------------------------

def test_the_checks_find_what_is_wrong(tmp_path):
    assert anchor("Maintainer: (re)build a release") == "maintainer-rebuild-a-release"
    assert anchor("`bench_demo.py`") == "bench_demopy"
    doc = REPO_ROOT / "docs" / "_probe_for_test_docs.md"
    try:
        doc.write_text("# Title\n\n[ok](#title) [gone](nowhere.md) [out](../../x.md) [bad](../README.md#no-such)\n"
                       "```bash\n[not a link](nowhere.md)\n```\n", encoding="utf-8")
        problems = broken_links(doc)
    finally:
        doc.unlink()
    assert len(problems) == 3 and "does not exist" in problems[0] and "outside" in problems[1] \
        and "no heading" in problems[2]
    assert check_command("stack up --workers 2", True)[1] is None
    assert check_command("stack upp", True)[1] == "no command rescue stack upp"
    assert "no option --no-such" in check_command("stack up --no-such", True)[1]
    assert check_command("agreement", True)[1] is not None          # its round is missing
    assert check_command("agreement ROUND --override REASON --by NAME", False)[1] is None
    assert check_command("label-studio up|down [--annotator EMAIL]", False)[1] is None
    found = command_lines("run `.venv/bin/rescue stack down --data-root data/demo` or\n"
                          "```bash\neval \"$(rescue stack env)\"   # comment\nrescue validate # exit 1\n```\n")
    assert found == [("stack env", True), ("validate", True), ("stack down --data-root data/demo", False)]
    assert command_lines("```\nrescue stack env > env.sh 2>/dev/null\n```\n") == [("stack env", True)]
    notes = ["Session 21: faster", "figures in the #12 closing note", "(issue #28)", "measured 2026-11-30",
             "with all four (`1b161c1` and after)"]
    assert all(any(p.search(n) for p, _ in LAB_NOTES) for n in notes)
    assert not any(p.search(line) for p, _ in LAB_NOTES
                   for line in ["batch_dir=/srv/batches/2026-11", "[x](#bench_demopy)", "row 4 of 12", "`rescue-cpu`"])


def test_commands_work_in_a_fresh_shell():
    """README's commands run as shown in a new shell (``.venv/bin/rescue``); a guide that writes
    them bare says once how to put the environment on PATH."""
    path_line = 'export PATH="$PWD/.venv/bin:$PATH"'
    bare = re.compile(r"^\s*(?:rescue|prefect)\s")
    readme = parse_markdown((REPO_ROOT / "README.md").read_text(encoding="utf-8"))
    assert not [line for line in readme.code_lines if bare.match(line)], \
        "README shows bare rescue/prefect commands: write .venv/bin/rescue"
    problems = []
    for path in markdown_files():
        text = path.read_text(encoding="utf-8")
        parsed = parse_markdown(text)
        if any(bare.match(line) for line in parsed.code_lines) and path_line not in text:
            problems.append(str(path.relative_to(REPO_ROOT)))
    assert not problems, f"bare rescue/prefect commands without saying how to put .venv/bin on PATH: {problems}"


def test_readme_links_stay_inside_the_repository():
    links = LINK.findall(parse_markdown((REPO_ROOT / "README.md").read_text(encoding="utf-8")).prose)
    outside = [t for t in links if re.match(r"[a-z][a-z0-9+.-]*:|/", t)]
    assert links and not outside, f"README links outside the repository: {outside}"
